import { App, SuggestModal } from "obsidian";
import type { SearchHit } from "./api.ts";
import { parseAsked } from "./filters.ts";
import { Latest } from "./later.ts";
import { renderHit, renderTrouble } from "./render.ts";
import type MemsyncPlugin from "./main.ts";

// a hit to open, or a line to read (a notice, or why memsync cannot answer and what to run)
export type Suggestion = { hit: SearchHit; terms: string[] } | { message: string; commands: string[] };

// ms of quiet typing before the server is asked
const TYPING_PAUSE = 250;

export class SearchModal extends SuggestModal<Suggestion> {
	private plugin: MemsyncPlugin;
	private latest = new Latest<Suggestion[]>(TYPING_PAUSE);

	constructor(app: App, plugin: MemsyncPlugin) {
		super(app);
		this.plugin = plugin;
		this.setPlaceholder("Search notes (filters: path:folder/ tag:name)");
		this.setInstructions([
			{ command: "↵", purpose: "open the note at these lines" },
			{ command: "path:folder/ tag:name", purpose: "filter by folder or tag" },
		]);
		this.emptyStateText = "No notes match.";
	}

	getSuggestions(typed: string): Suggestion[] | Promise<Suggestion[]> {
		const asked = parseAsked(typed);
		if (!asked.q) {
			this.latest.cancel();
			return [];
		}
		return this.latest.run(() => this.plugin.searchSuggestions(asked));
	}

	renderSuggestion(item: Suggestion, el: HTMLElement): void {
		if ("hit" in item) renderHit(el, item.hit, item.terms);
		else renderTrouble(el, item.message, item.commands);
	}

	onChooseSuggestion(item: Suggestion): void {
		if ("hit" in item) void this.plugin.openAt(item.hit.path, item.hit.start_line, item.hit.end_line);
	}

	onClose(): void {
		this.latest.cancel();
		super.onClose();
	}
}
