import assert from "node:assert/strict";
import { test } from "node:test";
import { markTerms, noteTitle, renderHit, renderLinks, renderRelated, renderTrouble, where } from "../src/render.ts";
import { div } from "./standin.ts";

const hit = {
	path: "tech/redis.md",
	start_line: 1,
	end_line: 4,
	score: 0.876,
	snippet: "# Redis\nThe staging Redis listens on port 6380.",
	snippet_start_line: 2,
};

test("a hit shows its note, path:start-end, its score and its lines numbered, the answer's words marked", () => {
	const el = div();
	renderHit(el, hit, ["redis", "port"]);
	assert.equal(el.querySelector(".memsync-hit-note")?.textContent, "redis");
	assert.equal(el.querySelector(".memsync-hit-where")?.textContent, "tech/redis.md:1-4");
	assert.equal(el.querySelector(".memsync-hit-score")?.textContent, "0.88");
	const numbers = [...el.querySelectorAll(".memsync-line-number")].map((n) => n.textContent);
	assert.deepEqual(numbers, ["2", "3"]);
	const marks = [...el.querySelectorAll("mark")].map((m) => m.textContent);
	assert.deepEqual(marks, ["Redis", "Redis", "port"]);
	assert.equal(el.querySelectorAll(".memsync-line-text")[1]?.textContent, "The staging Redis listens on port 6380.");
});

test("marking takes the words as given: any case, Chinese, and no markup from the note", () => {
	const el = div();
	markTerms(el, "测试服务器的SSH端口是2222 <b>", ["端口", "ssh"]);
	assert.deepEqual([...el.querySelectorAll("mark")].map((m) => m.textContent), ["SSH", "端口"]);
	assert.equal(el.textContent, "测试服务器的SSH端口是2222 <b>");
	assert.equal(el.querySelectorAll("b").length, 0);
	const plain = div();
	markTerms(plain, "a.b (c)", [".", "(c)"]);
	assert.deepEqual([...plain.querySelectorAll("mark")].map((m) => m.textContent), [".", "(c)"]);
});

test("a trouble is its line and the commands that fix it", () => {
	const el = div();
	renderTrouble(el, "memsync is not running at http://127.0.0.1:8631.", ['memsync serve "/v"', "memsync token add obsidian"]);
	assert.equal(el.querySelector(".memsync-trouble")?.textContent, "memsync is not running at http://127.0.0.1:8631.");
	assert.deepEqual([...el.querySelectorAll("pre")].map((p) => p.textContent), ['memsync serve "/v"', "memsync token add obsidian"]);
});

test("related notes open at their lines; links and backlinks are listed apart, below", () => {
	const el = div();
	const opened: Array<[string, number, number]> = [];
	const open = (path: string, start: number, end: number) => opened.push([path, start, end]);
	renderRelated(el, { note: "a.md", mode: "hybrid", notices: ["no vectors: by keyword"], results: [hit] }, open);
	renderLinks(el, {
		path: "a.md",
		links: [
			{ path: "a.md", line: 3, link: "[[Redis]]", kind: "link", target: "Redis", resolved: "tech/redis.md" },
			{ path: "a.md", line: 4, link: "[[Nowhere]]", kind: "link", target: "Nowhere", resolved: null },
		],
		backlinks: [{ path: "daily/d.md", line: 7, link: "[[a]]", kind: "link", target: "a", resolved: "a.md", text: "see [[a]]" }],
		more: "",
	}, open);
	assert.equal(el.querySelector(".memsync-notice")?.textContent, "no vectors: by keyword");
	for (const item of el.querySelectorAll(".memsync-clickable")) (item as HTMLElement).click();
	assert.deepEqual(opened, [["tech/redis.md", 1, 4], ["tech/redis.md", 1, 1], ["daily/d.md", 7, 7]]);
	assert.deepEqual([...el.querySelectorAll(".memsync-section-title")].map((t) => t.textContent), ["Links (2)", "Backlinks (1)"]);
	assert.equal(el.querySelectorAll(".memsync-unresolved").length, 1);
	assert.equal(where("a.md", 3, 3), "a.md:3");
	assert.equal(noteTitle("笔记/测试服务器.md"), "测试服务器");
});
