import assert from "node:assert/strict";
import { test } from "node:test";
import { quoted, serveCommands, served } from "../src/vault.ts";

test("the served vault is this one when its folder is this vault's, however the path is spelled", () => {
	assert.equal(served("/home/ann/notes", { base: "/home/ann/notes/", name: "notes" }), "same");
	assert.equal(served("C:\\Users\\Ann\\Notes", { base: "c:/users/ann/notes", name: "Notes" }), "same");
	assert.equal(served("/home/ann/notes", { base: "/home/ann/work", name: "work" }), "other");
	assert.equal(served(null, { base: "/home/ann/notes", name: "notes" }), "other");
});

test("without a folder of its own (mobile), or served from elsewhere, the vault is known by its name", () => {
	assert.equal(served("/home/ann/notes", { base: null, name: "notes" }), "named");
	assert.equal(served("/srv/ann/notes", { base: "/Users/ann/notes", name: "notes" }), "named");
	assert.equal(served("/home/ann/work", { base: null, name: "notes" }), "other");
});

test("the commands to run name this vault's folder, quoted for the shell", () => {
	assert.deepEqual(serveCommands({ base: "/home/ann/My notes", name: "My notes" }, false), [
		'memsync serve "/home/ann/My notes"',
		"memsync token add obsidian",
	]);
	assert.equal(quoted('/a/$HOME "x"', false), '"/a/\\$HOME \\"x\\""');
	assert.equal(quoted("C:\\Users\\Ann\\Notes", true), '"C:\\Users\\Ann\\Notes"');
	assert.match(serveCommands({ base: null, name: "notes" }, false)[0] ?? "", /^memsync serve "<the folder of the vault notes>"$/);
});
