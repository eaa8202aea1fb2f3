// What the modal and the pane show, drawn with Obsidian's DOM helpers (createDiv, createSpan...).
// The words to mark come from the server's answer: no rule of the search is kept here.
import type { Links, RelatedAnswer, SearchHit } from "./api.ts";

export type Open = (path: string, startLine: number, endLine: number) => void;

function escaped(word: string): string {
	return word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// `line` into `parent`, each occurrence of a term (any case) in a <mark>
export function markTerms(parent: HTMLElement, line: string, terms: string[]): void {
	const words = terms.filter((term) => term.length > 0);
	if (words.length === 0) {
		parent.appendText(line);
		return;
	}
	const pattern = new RegExp(words.map(escaped).join("|"), "giu");
	let last = 0;
	for (const match of line.matchAll(pattern)) {
		const start = match.index ?? 0;
		parent.appendText(line.slice(last, start));
		parent.createEl("mark", { text: match[0] });
		last = start + match[0].length;
	}
	parent.appendText(line.slice(last));
}

export function where(path: string, start: number, end: number): string {
	return start === end ? `${path}:${start}` : `${path}:${start}-${end}`;
}

export function noteTitle(path: string): string {
	const name = path.split("/").pop() ?? path;
	return name.replace(/\.md$/i, "");
}

// a hit: its note, path:start-end, score, and its lines numbered as in the note
export function renderHit(el: HTMLElement, hit: SearchHit, terms: string[]): void {
	el.addClass("memsync-hit");
	const head = el.createDiv({ cls: "memsync-hit-head" });
	head.createSpan({ cls: "memsync-hit-note", text: noteTitle(hit.path) });
	head.createSpan({ cls: "memsync-hit-where", text: where(hit.path, hit.start_line, hit.end_line) });
	head.createSpan({ cls: "memsync-hit-score", text: hit.score.toFixed(2) });
	const lines = el.createDiv({ cls: "memsync-hit-lines" });
	hit.snippet.split("\n").forEach((line, offset) => {
		const row = lines.createDiv({ cls: "memsync-line" });
		row.createSpan({ cls: "memsync-line-number", text: String(hit.snippet_start_line + offset) });
		markTerms(row.createSpan({ cls: "memsync-line-text" }), line, terms);
	});
}

// a line saying what went wrong, and the commands that fix it when there are any
export function renderTrouble(el: HTMLElement, message: string, commands: string[]): void {
	el.createDiv({ cls: "memsync-trouble", text: message });
	if (commands.length === 0) return;
	el.createDiv({ cls: "memsync-help", text: "Run in a terminal:" });
	for (const command of commands) el.createEl("pre", { cls: "memsync-command", text: command });
}

function clickable(el: HTMLElement, open: () => void): void {
	el.addClass("memsync-clickable");
	el.addEventListener("click", open);
}

export function renderRelated(el: HTMLElement, answer: RelatedAnswer, open: Open): void {
	const section = el.createDiv({ cls: "memsync-related" });
	for (const notice of answer.notices) section.createDiv({ cls: "memsync-notice", text: notice });
	if (answer.results.length === 0) section.createDiv({ cls: "memsync-empty", text: "No related notes." });
	for (const hit of answer.results) {
		const item = section.createDiv();
		renderHit(item, hit, []);
		clickable(item, () => open(hit.path, hit.start_line, hit.end_line));
	}
}

// the note's links, then the notes linking to it: apart from the related notes, never mixed in
export function renderLinks(el: HTMLElement, links: Links, open: Open): void {
	const out = el.createDiv({ cls: "memsync-links" });
	out.createDiv({ cls: "memsync-section-title", text: `Links (${links.links.length})` });
	for (const link of links.links) {
		const item = out.createDiv({ cls: "memsync-link" });
		const resolved = link.resolved;
		item.createSpan({ cls: "memsync-hit-note", text: resolved === null ? link.target : noteTitle(resolved) });
		item.createSpan({ cls: "memsync-hit-where", text: `line ${link.line}` });
		if (resolved === null) item.addClass("memsync-unresolved");
		else clickable(item, () => open(resolved, 1, 1));
	}
	out.createDiv({ cls: "memsync-section-title", text: `Backlinks (${links.backlinks.length})` });
	for (const backlink of links.backlinks) {
		const item = out.createDiv({ cls: "memsync-link" });
		item.createSpan({ cls: "memsync-hit-note", text: noteTitle(backlink.path) });
		item.createSpan({ cls: "memsync-hit-where", text: where(backlink.path, backlink.line, backlink.line) });
		item.createDiv({ cls: "memsync-line-text", text: backlink.text });
		clickable(item, () => open(backlink.path, backlink.line, backlink.line));
	}
	if (links.more) out.createDiv({ cls: "memsync-notice", text: links.more });
}
