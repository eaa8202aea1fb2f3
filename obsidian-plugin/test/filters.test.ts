import assert from "node:assert/strict";
import { test } from "node:test";
import { parseAsked } from "../src/filters.ts";

test("path: and tag: (or #tag) are filters, the rest the words to search for", () => {
	assert.deepEqual(parseAsked("heron path:projects/ sync tag:ops #work"), {
		q: "heron sync",
		path: ["projects/"],
		tag: ["ops", "work"],
	});
	assert.deepEqual(parseAsked('path:"Daily notes/" standup'), { q: "standup", path: ["Daily notes/"], tag: [] });
	assert.deepEqual(parseAsked("  端口  "), { q: "端口", path: [], tag: [] });
	assert.deepEqual(parseAsked("tag:ops"), { q: "", path: [], tag: ["ops"] });
});
