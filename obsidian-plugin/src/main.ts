import { FileSystemAdapter, MarkdownView, Notice, Platform, Plugin, TFile, requestUrl } from "obsidian";
import {
	Client,
	DEFAULT_SETTINGS,
	Trouble,
	statusLine,
	type Links,
	type MemsyncSettings,
	type RelatedAnswer,
	type ServerStatus,
} from "./api.ts";
import type { Asked } from "./filters.ts";
import { RELATED_VIEW, RelatedView } from "./related-view.ts";
import { SearchModal, type Suggestion } from "./search-modal.ts";
import { MemsyncSettingTab } from "./settings.ts";
import { serveCommands, served, type ThisVault } from "./vault.ts";

// ms between two looks at the server's status for the status bar
const STATUS_EVERY = 30_000;

const SHORT: Record<Trouble["kind"], string> = {
	"no-token": "no token",
	"not-running": "not running",
	"wrong-token": "wrong token",
	refused: "refused",
	"other-vault": "serves another vault",
};

export type Explained = { message: string; commands: string[] };

export default class MemsyncPlugin extends Plugin {
	settings: MemsyncSettings = { ...DEFAULT_SETTINGS };
	client = new Client(
		() => this.settings,
		async (request) => {
			const answer = await requestUrl(request);
			return { status: answer.status, text: answer.text };
		},
	);
	private statusEl: HTMLElement | null = null;
	private checked = false; // the server was seen serving this vault with these settings

	async onload(): Promise<void> {
		await this.loadSettings();
		this.registerView(RELATED_VIEW, (leaf) => new RelatedView(leaf, this));
		this.addRibbonIcon("search", "Search notes", () => this.openSearch());
		this.addCommand({ id: "search-notes", name: "Search notes", callback: () => this.openSearch() });
		this.addCommand({ id: "open-related-notes", name: "Open related notes", callback: () => void this.openRelated() });
		this.addSettingTab(new MemsyncSettingTab(this.app, this));
		this.statusEl = this.addStatusBarItem();
		this.statusEl.addClass("memsync-status");
		this.registerInterval(window.setInterval(() => void this.refreshStatus(), STATUS_EVERY));
		this.app.workspace.onLayoutReady(() => void this.refreshStatus());
	}

	async loadSettings(): Promise<void> {
		const stored = (await this.loadData()) as Partial<MemsyncSettings> | null;
		this.settings = { ...DEFAULT_SETTINGS, ...stored };
	}

	async saveSettings(): Promise<void> {
		this.checked = false;
		await this.saveData(this.settings);
	}

	openSearch(): void {
		new SearchModal(this.app, this).open();
	}

	async openRelated(): Promise<void> {
		const { workspace } = this.app;
		let leaf = workspace.getLeavesOfType(RELATED_VIEW)[0];
		if (!leaf) {
			leaf = workspace.getRightLeaf(false) ?? workspace.getLeaf("split");
			await leaf.setViewState({ type: RELATED_VIEW, active: true });
		}
		await workspace.revealLeaf(leaf);
	}

	thisVault(): ThisVault {
		const adapter = this.app.vault.adapter;
		return {
			base: adapter instanceof FileSystemAdapter ? adapter.getBasePath() : null,
			name: this.app.vault.getName(),
		};
	}

	// the server's status, once it is known to serve this vault (paths then map one to one)
	private async servedStatus(): Promise<ServerStatus> {
		const status = await this.client.status();
		const here = this.thisVault();
		if (served(status.vault, here) === "other") {
			const mine = here.base ?? here.name;
			throw new Trouble("other-vault", `Another vault is served: ${status.vault ?? "none"}, not this one (${mine}).`);
		}
		this.checked = true;
		return status;
	}

	private async ensureServed(): Promise<void> {
		if (!this.checked) await this.servedStatus();
	}

	explained(error: unknown): Explained {
		if (!(error instanceof Trouble)) {
			return { message: `Could not ask memsync: ${error instanceof Error ? error.message : String(error)}`, commands: [] };
		}
		if (error.kind !== "refused") this.checked = false;
		const commands = serveCommands(this.thisVault(), Platform.isWin);
		if (error.kind === "not-running") return { message: error.message, commands };
		if (error.kind === "no-token") return { message: error.message, commands: commands.slice(1) };
		return { message: error.message, commands: [] };
	}

	async searchSuggestions(asked: Asked): Promise<Suggestion[]> {
		try {
			await this.ensureServed();
			const answer = await this.client.search(asked.q, asked.path, asked.tag);
			const notices = answer.notices.map((notice) => ({ message: notice, commands: [] }));
			return [...answer.results.map((hit) => ({ hit, terms: answer.terms ?? [] })), ...notices];
		} catch (error) {
			return [this.explained(error)];
		}
	}

	async relatedOf(path: string): Promise<{ related: RelatedAnswer; links: Links } | Explained> {
		try {
			await this.ensureServed();
			const [related, links] = await Promise.all([this.client.related(path), this.client.links(path)]);
			return { related, links };
		} catch (error) {
			return this.explained(error);
		}
	}

	// one line for the settings' test button
	async testConnection(): Promise<string> {
		try {
			const status = await this.servedStatus();
			return `Connected: memsync serves this vault (${status.files_indexed} notes indexed).`;
		} catch (error) {
			const { message, commands } = this.explained(error);
			return commands.length > 0 ? `${message} Run: ${commands.join(" && ")}` : message;
		}
	}

	async refreshStatus(): Promise<void> {
		const el = this.statusEl;
		if (el === null) return;
		try {
			const status = await this.servedStatus();
			el.setText(statusLine(status));
			el.setAttr("aria-label", `memsync serve at ${this.settings.server}`);
		} catch (error) {
			el.setText(`memsync: ${error instanceof Trouble ? SHORT[error.kind] : "unreachable"}`);
			el.setAttr("aria-label", this.explained(error).message);
		}
	}

	// the note, scrolled to its lines and with them selected
	async openAt(path: string, startLine: number, endLine: number): Promise<void> {
		const file = this.app.vault.getAbstractFileByPath(path);
		if (!(file instanceof TFile)) {
			new Notice(`${path} is not in this vault.`);
			return;
		}
		const leaf = this.app.workspace.getLeaf(false);
		await leaf.openFile(file, { eState: { line: startLine - 1 } });
		const view = leaf.view;
		if (!(view instanceof MarkdownView)) return;
		const last = Math.min(endLine, view.editor.lineCount()) - 1;
		const from = { line: startLine - 1, ch: 0 };
		const to = { line: last, ch: view.editor.getLine(last).length };
		view.editor.setSelection(from, to);
		view.editor.scrollIntoView({ from, to }, true);
	}
}
