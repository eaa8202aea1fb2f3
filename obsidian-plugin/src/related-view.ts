import { ItemView, TFile, WorkspaceLeaf } from "obsidian";
import { renderLinks, renderRelated, renderTrouble } from "./render.ts";
import type MemsyncPlugin from "./main.ts";

export const RELATED_VIEW = "memsync-related";
// ms after a save before asking again: the daemon re-indexes a saved note within a second
const REINDEXED_WITHIN = 1500;

// The side pane: the active note's related notes (by meaning, from memsync), then its links and
// backlinks; it follows the active note and asks again after the note is saved.
export class RelatedView extends ItemView {
	private plugin: MemsyncPlugin;
	private shown: string | null = null;
	private asked = 0; // the latest question: an answer to an earlier one is dropped
	private saved: number | undefined;

	constructor(leaf: WorkspaceLeaf, plugin: MemsyncPlugin) {
		super(leaf);
		this.plugin = plugin;
	}

	getViewType(): string {
		return RELATED_VIEW;
	}

	getDisplayText(): string {
		return "Related notes";
	}

	getIcon(): string {
		return "network";
	}

	async onOpen(): Promise<void> {
		this.registerEvent(this.app.workspace.on("active-leaf-change", () => void this.follow()));
		this.registerEvent(
			this.app.vault.on("modify", (file) => {
				if (file.path !== this.shown) return;
				window.clearTimeout(this.saved);
				this.saved = window.setTimeout(() => void this.show(file.path), REINDEXED_WITHIN);
			}),
		);
		await this.follow();
	}

	async onClose(): Promise<void> {
		window.clearTimeout(this.saved);
		this.asked += 1;
	}

	// the active note, when it changed (a click in this pane leaves it as it was)
	async follow(): Promise<void> {
		const file = this.app.workspace.getActiveFile();
		if (!(file instanceof TFile) || file.extension !== "md" || file.path === this.shown) return;
		await this.show(file.path);
	}

	async show(path: string): Promise<void> {
		this.shown = path;
		const asked = ++this.asked;
		const answers = await this.plugin.relatedOf(path);
		if (asked !== this.asked) return;
		const el = this.contentEl;
		el.empty();
		el.addClass("memsync-pane");
		el.createDiv({ cls: "memsync-pane-title", text: `Related to ${path}` });
		const open = (note: string, start: number, end: number) => void this.plugin.openAt(note, start, end);
		if ("message" in answers) {
			renderTrouble(el, answers.message, answers.commands);
			return;
		}
		renderRelated(el, answers.related, open);
		renderLinks(el, answers.links, open);
	}
}
