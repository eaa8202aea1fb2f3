// A small stand-in for the parts of Obsidian's API the plugin uses, over a happy-dom document:
// enough to load the built main.js in Node and drive it as the app would. Tests only.
import { readFileSync, existsSync, statSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import path from "node:path";
import { Window } from "happy-dom";

type Callback = (...args: unknown[]) => unknown;

// -- the DOM, with the helpers Obsidian adds to every element -----------------------------------

interface ElementInfo {
	cls?: string | string[];
	text?: string;
	attr?: Record<string, string>;
}

let installed: Window | null = null;

export function installDom(): void {
	if (installed) return;
	const window = new Window();
	installed = window;
	// the app's window: its timers are Node's, so a finished test run exits
	Object.assign(window, { setTimeout, clearTimeout, setInterval, clearInterval });
	const scope = globalThis as Record<string, unknown>;
	for (const name of ["document", "HTMLElement", "Node", "DocumentFragment", "KeyboardEvent", "MouseEvent"]) {
		scope[name] = (window as unknown as Record<string, unknown>)[name];
	}
	scope.window = window;
	const node = window.Node.prototype as unknown as Record<string, unknown>;
	function createEl(this: HTMLElement | DocumentFragment, tag: string, info?: ElementInfo | string, callback?: (el: HTMLElement) => void) {
		const el = window.document.createElement(tag) as unknown as HTMLElement;
		const given = typeof info === "string" ? { text: info } : (info ?? {});
		if (given.cls) el.className = Array.isArray(given.cls) ? given.cls.join(" ") : given.cls;
		if (given.text !== undefined) el.textContent = given.text;
		for (const [name, value] of Object.entries(given.attr ?? {})) el.setAttribute(name, value);
		this.appendChild(el);
		callback?.(el);
		return el;
	}
	Object.assign(node, {
		createEl,
		createDiv(this: HTMLElement, info?: ElementInfo | string, callback?: (el: HTMLElement) => void) {
			return createEl.call(this, "div", info, callback);
		},
		createSpan(this: HTMLElement, info?: ElementInfo | string, callback?: (el: HTMLElement) => void) {
			return createEl.call(this, "span", info, callback);
		},
		appendText(this: HTMLElement, text: string) {
			this.appendChild(window.document.createTextNode(text) as unknown as Node);
		},
		empty(this: HTMLElement) {
			while (this.firstChild) this.removeChild(this.firstChild);
		},
		setText(this: HTMLElement, text: string) {
			this.textContent = text;
		},
		addClass(this: HTMLElement, ...names: string[]) {
			this.classList.add(...names);
		},
		removeClass(this: HTMLElement, ...names: string[]) {
			this.classList.remove(...names);
		},
		setAttr(this: HTMLElement, name: string, value: string) {
			this.setAttribute(name, value);
		},
	});
	scope.createFragment = (callback?: (fragment: DocumentFragment) => void) => {
		const fragment = window.document.createDocumentFragment() as unknown as DocumentFragment;
		callback?.(fragment);
		return fragment;
	};
	scope.createDiv = (info?: ElementInfo | string) => createEl.call(window.document.createDocumentFragment() as unknown as DocumentFragment, "div", info);
}

export function div(): HTMLElement {
	installDom();
	return document.createElement("div");
}

// -- requestUrl: a real HTTP request, with the Origin Obsidian's sends -------------------------

export const APP_ORIGIN = "app://obsidian.md";

interface RequestParam {
	url: string;
	method?: string;
	headers?: Record<string, string>;
	throw?: boolean;
}

export const sent: RequestParam[] = []; // every request the plugin made, in order

export function requestUrl(request: RequestParam): Promise<{ status: number; text: string; json: unknown }> {
	sent.push(request);
	const url = new URL(request.url);
	const client = url.protocol === "https:" ? https : http;
	return new Promise((resolve, reject) => {
		const asking = client.request(url, { method: request.method ?? "GET", headers: { ...request.headers, Origin: APP_ORIGIN } }, (response) => {
			const chunks: Buffer[] = [];
			response.on("data", (chunk: Buffer) => chunks.push(chunk));
			response.on("end", () => {
				const text = Buffer.concat(chunks).toString("utf8");
				const status = response.statusCode ?? 0;
				if (status >= 400 && request.throw !== false) reject(new Error(`Request failed, status ${status}`));
				else resolve({ status, text, get json() { return JSON.parse(text) as unknown; } });
			});
		});
		asking.on("error", () => reject(new Error("net::ERR_CONNECTION_REFUSED")));
		asking.end();
	});
}

// -- the app: a vault on disk, a workspace with leaves ------------------------------------------

class Events {
	private handlers = new Map<string, Callback[]>();

	on(name: string, callback: Callback): { name: string; callback: Callback; owner: Events } {
		this.handlers.set(name, [...(this.handlers.get(name) ?? []), callback]);
		return { name, callback, owner: this };
	}

	offref(ref: { name: string; callback: Callback }): void {
		this.handlers.set(ref.name, (this.handlers.get(ref.name) ?? []).filter((each) => each !== ref.callback));
	}

	trigger(name: string, ...args: unknown[]): void {
		for (const handler of this.handlers.get(name) ?? []) handler(...args);
	}
}

export class TAbstractFile {
	path: string;
	name: string;

	constructor(filePath: string) {
		this.path = filePath;
		this.name = filePath.split("/").pop() ?? filePath;
	}
}

export class TFile extends TAbstractFile {
	extension: string;
	basename: string;

	constructor(filePath: string) {
		super(filePath);
		this.extension = this.name.includes(".") ? (this.name.split(".").pop() ?? "") : "";
		this.basename = this.name.replace(/\.[^.]*$/, "");
	}
}

export class FileSystemAdapter {
	private base: string;

	constructor(base: string) {
		this.base = base;
	}

	getBasePath(): string {
		return this.base;
	}
}

class Vault extends Events {
	adapter: FileSystemAdapter | object;
	private base: string;

	constructor(base: string, onDisk: boolean) {
		super();
		this.base = base;
		this.adapter = onDisk ? new FileSystemAdapter(base) : {};
	}

	getName(): string {
		return path.basename(this.base);
	}

	getAbstractFileByPath(filePath: string): TFile | null {
		const full = path.join(this.base, filePath);
		return existsSync(full) && statSync(full).isFile() ? new TFile(filePath) : null;
	}

	lines(filePath: string): string[] {
		return readFileSync(path.join(this.base, filePath), "utf8").split("\n");
	}
}

export class Editor {
	private text: string[];
	selection: { from: { line: number; ch: number }; to: { line: number; ch: number } } | null = null;
	scrolledTo: { from: { line: number }; to: { line: number } } | null = null;

	constructor(text: string[]) {
		this.text = text;
	}

	lineCount(): number {
		return this.text.length;
	}

	getLine(line: number): string {
		return this.text[line] ?? "";
	}

	setSelection(from: { line: number; ch: number }, to: { line: number; ch: number }): void {
		this.selection = { from, to };
	}

	scrollIntoView(range: { from: { line: number }; to: { line: number } }): void {
		this.scrolledTo = range;
	}
}

export class Component {
	private cleanups: Array<() => void> = [];

	registerEvent(ref: { name: string; callback: Callback; owner: Events }): void {
		this.cleanups.push(() => ref.owner.offref(ref));
	}

	registerInterval(id: number): number {
		this.cleanups.push(() => clearInterval(id));
		return id;
	}

	register(cleanup: () => void): void {
		this.cleanups.push(cleanup);
	}

	unloadAll(): void {
		for (const cleanup of this.cleanups.splice(0)) cleanup();
	}
}

export class View extends Component {
	app: App;
	leaf: WorkspaceLeaf;
	containerEl: HTMLElement;

	constructor(leaf: WorkspaceLeaf) {
		super();
		this.leaf = leaf;
		this.app = leaf.app;
		this.containerEl = div();
	}
}

export class ItemView extends View {
	contentEl: HTMLElement;

	constructor(leaf: WorkspaceLeaf) {
		super(leaf);
		this.containerEl.createDiv({ cls: "view-header" });
		this.contentEl = this.containerEl.createDiv({ cls: "view-content" });
	}
}

export class MarkdownView extends View {
	file: TFile;
	editor: Editor;

	constructor(leaf: WorkspaceLeaf, file: TFile) {
		super(leaf);
		this.file = file;
		this.editor = new Editor(leaf.app.vault.lines(file.path));
	}
}

export class WorkspaceLeaf {
	app: App;
	view: View | null = null;
	openState: unknown = null;

	constructor(app: App) {
		this.app = app;
	}

	async openFile(file: TFile, state?: unknown): Promise<void> {
		this.view = new MarkdownView(this, file);
		this.openState = state ?? null;
		this.app.workspace.setActive(file);
	}

	async setViewState(state: { type: string }): Promise<void> {
		const make = this.app.views.get(state.type);
		if (!make) throw new Error(`no view of type ${state.type}`);
		const view = make(this);
		this.view = view;
		await (view as unknown as { onOpen(): Promise<void> }).onOpen();
	}
}

class Workspace extends Events {
	app: App;
	active: TFile | null = null;
	leaves: WorkspaceLeaf[] = [];
	private ready: Array<() => void> = [];

	constructor(app: App) {
		super();
		this.app = app;
	}

	getActiveFile(): TFile | null {
		return this.active;
	}

	setActive(file: TFile): void {
		this.active = file;
		this.trigger("active-leaf-change", null);
	}

	getLeaf(): WorkspaceLeaf {
		const leaf = new WorkspaceLeaf(this.app);
		this.leaves.push(leaf);
		return leaf;
	}

	getRightLeaf(): WorkspaceLeaf {
		return this.getLeaf();
	}

	getLeavesOfType(type: string): WorkspaceLeaf[] {
		return this.leaves.filter((leaf) => (leaf.view as { getViewType?: () => string } | null)?.getViewType?.() === type);
	}

	async revealLeaf(): Promise<void> {}

	onLayoutReady(callback: () => void): void {
		this.ready.push(callback);
	}

	layoutReady(): void {
		for (const callback of this.ready.splice(0)) callback();
	}
}

export class App {
	vault: Vault;
	workspace: Workspace;
	views = new Map<string, (leaf: WorkspaceLeaf) => View>();

	constructor(vaultFolder: string, onDisk = true) {
		this.vault = new Vault(vaultFolder, onDisk);
		this.workspace = new Workspace(this);
	}
}

// -- the plugin's own kinds: Plugin, modals, settings ---------------------------------------------

export interface Command {
	id: string;
	name: string;
	callback: () => unknown;
}

export class Plugin extends Component {
	app: App;
	manifest: unknown;
	commands: Command[] = [];
	ribbon: Array<{ icon: string; title: string; callback: () => unknown }> = [];
	statusBar: HTMLElement[] = [];
	settingTabs: PluginSettingTab[] = [];
	stored: unknown = null;

	constructor(app: App, manifest: unknown) {
		super();
		this.app = app;
		this.manifest = manifest;
	}

	async loadData(): Promise<unknown> {
		return this.stored;
	}

	async saveData(data: unknown): Promise<void> {
		this.stored = JSON.parse(JSON.stringify(data)) as unknown;
	}

	registerView(type: string, make: (leaf: WorkspaceLeaf) => View): void {
		this.app.views.set(type, make);
	}

	addCommand(command: Command): Command {
		this.commands.push(command);
		return command;
	}

	addRibbonIcon(icon: string, title: string, callback: () => unknown): HTMLElement {
		this.ribbon.push({ icon, title, callback });
		return div();
	}

	addStatusBarItem(): HTMLElement {
		const el = div();
		this.statusBar.push(el);
		return el;
	}

	addSettingTab(tab: PluginSettingTab): void {
		this.settingTabs.push(tab);
	}
}

export class Modal {
	app: App;
	containerEl: HTMLElement;
	static opened: Modal[] = [];

	constructor(app: App) {
		this.app = app;
		this.containerEl = div();
	}

	open(): void {
		Modal.opened.push(this);
	}

	close(): void {
		this.onClose();
	}

	onClose(): void {}
}

export class SuggestModal<T> extends Modal {
	inputEl: HTMLInputElement;
	resultContainerEl: HTMLElement;
	emptyStateText = "";
	placeholder = "";
	instructions: unknown[] = [];
	shown: Array<{ item: T; el: HTMLElement }> = [];

	constructor(app: App) {
		super(app);
		this.inputEl = this.containerEl.createEl("input");
		this.resultContainerEl = this.containerEl.createDiv();
	}

	setPlaceholder(text: string): void {
		this.placeholder = text;
	}

	setInstructions(instructions: unknown[]): void {
		this.instructions = instructions;
	}

	// what the app does on each keystroke: ask, then draw every suggestion
	async type(text: string): Promise<Array<{ item: T; el: HTMLElement }>> {
		this.inputEl.value = text;
		const items = await (this as unknown as { getSuggestions(q: string): T[] | Promise<T[]> }).getSuggestions(text);
		this.resultContainerEl.empty();
		this.shown = items.map((item) => {
			const el = this.resultContainerEl.createDiv({ cls: "suggestion-item" });
			(this as unknown as { renderSuggestion(item: T, el: HTMLElement): void }).renderSuggestion(item, el);
			return { item, el };
		});
		return this.shown;
	}

	choose(index: number): void {
		const chosen = this.shown[index];
		if (!chosen) throw new Error(`no suggestion ${index}`);
		(this as unknown as { onChooseSuggestion(item: T, evt: unknown): void }).onChooseSuggestion(chosen.item, null);
	}
}

export class PluginSettingTab {
	app: App;
	plugin: Plugin;
	containerEl: HTMLElement;

	constructor(app: App, plugin: Plugin) {
		this.app = app;
		this.plugin = plugin;
		this.containerEl = div();
	}
}

class TextComponent {
	inputEl: HTMLInputElement;
	private changed: ((value: string) => unknown) | null = null;

	constructor(parent: HTMLElement) {
		this.inputEl = parent.createEl("input");
	}

	setPlaceholder(text: string): this {
		this.inputEl.placeholder = text;
		return this;
	}

	setValue(value: string): this {
		this.inputEl.value = value;
		return this;
	}

	onChange(callback: (value: string) => unknown): this {
		this.changed = callback;
		return this;
	}

	// what typing into the field does
	async enter(value: string): Promise<void> {
		this.inputEl.value = value;
		await this.changed?.(value);
	}
}

class ButtonComponent {
	buttonEl: HTMLButtonElement;
	clicked: (() => unknown) | null = null;

	constructor(parent: HTMLElement) {
		this.buttonEl = parent.createEl("button");
	}

	setButtonText(text: string): this {
		this.buttonEl.textContent = text;
		return this;
	}

	onClick(callback: () => unknown): this {
		this.clicked = callback;
		return this;
	}
}

export class Setting {
	settingEl: HTMLElement;
	nameEl: HTMLElement;
	descEl: HTMLElement;
	controlEl: HTMLElement;
	texts: TextComponent[] = [];
	buttons: ButtonComponent[] = [];
	static made: Setting[] = [];

	constructor(containerEl: HTMLElement) {
		this.settingEl = containerEl.createDiv({ cls: "setting-item" });
		this.nameEl = this.settingEl.createDiv({ cls: "setting-item-name" });
		this.descEl = this.settingEl.createDiv({ cls: "setting-item-description" });
		this.controlEl = this.settingEl.createDiv({ cls: "setting-item-control" });
		Setting.made.push(this);
	}

	setName(name: string): this {
		this.nameEl.textContent = name;
		return this;
	}

	setDesc(desc: string | DocumentFragment): this {
		this.descEl.empty();
		if (typeof desc === "string") this.descEl.textContent = desc;
		else this.descEl.appendChild(desc);
		return this;
	}

	addText(callback: (text: TextComponent) => unknown): this {
		const text = new TextComponent(this.controlEl);
		this.texts.push(text);
		callback(text);
		return this;
	}

	addButton(callback: (button: ButtonComponent) => unknown): this {
		const button = new ButtonComponent(this.controlEl);
		this.buttons.push(button);
		callback(button);
		return this;
	}
}

export class Notice {
	static shown: string[] = [];

	constructor(message: string) {
		Notice.shown.push(message);
	}
}

export const Platform = { isDesktop: true, isMobile: false, isDesktopApp: true, isMobileApp: false, isWin: false, isMacOS: false };

// -- loading the built plugin as Obsidian does: CommonJS, `obsidian` supplied by the app ----------

export const obsidian = {
	App, Component, Editor, FileSystemAdapter, ItemView, MarkdownView, Modal, Notice, Platform,
	Plugin, PluginSettingTab, Setting, SuggestModal, TAbstractFile, TFile, View, WorkspaceLeaf, requestUrl,
};

export function loadPluginClass(mainJs: string): new (app: App, manifest: unknown) => Plugin {
	installDom();
	const module = { exports: {} as Record<string, unknown> };
	const require = (name: string) => {
		if (name === "obsidian") return obsidian;
		throw new Error(`main.js asked for ${name}, which Obsidian does not supply`);
	};
	new Function("module", "exports", "require", readFileSync(mainJs, "utf8"))(module, module.exports, require);
	return module.exports.default as new (app: App, manifest: unknown) => Plugin;
}
