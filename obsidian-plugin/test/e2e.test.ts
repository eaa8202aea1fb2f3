// The built main.js, loaded with the stand-in for Obsidian, against a real `memsync serve` (from
// PATH: the repository's venv) on a free port over a copy of sample_vault.
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { App, Modal, type Plugin, type PluginSettingTab, Setting, SuggestModal, TFile, loadPluginClass, sent } from "./standin.ts";

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const repo = path.dirname(pluginDir);
const MEMSYNC_MISSING = "memsync is not on PATH: activate the repository's venv (.venv/bin)";
const found = spawnSync("memsync", ["--version"]).status === 0;
if (!found && process.env.CI) throw new Error(MEMSYNC_MISSING); // in CI a missing server is a failure
const skip = found ? false : MEMSYNC_MISSING;

let tmp = "";
let vault = "";
let token = "";
let server = "";
let serving: ChildProcess | null = null;
let env: NodeJS.ProcessEnv = {};
let log = "";
const plugins: Plugin[] = []; // each unloaded at the end, a failed test's too: their timers stop

function memsync(...args: string[]): string {
	return execFileSync("memsync", args, { env, encoding: "utf8" });
}

function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const probe = net.createServer();
		probe.listen(0, "127.0.0.1", () => {
			const address = probe.address();
			probe.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
		});
	});
}

// whether the server answers 200 to the token (while it starts, nothing listens)
function answers(url: string): Promise<boolean> {
	return new Promise((resolve) => {
		http.get(url, { headers: { Authorization: `Bearer ${token}` } }, (response) => {
			response.resume();
			resolve(response.statusCode === 200);
		}).on("error", () => resolve(false));
	});
}

// waits for a state the app reaches through events (the server starting, a pane drawing)
async function until<T>(what: string, check: () => T | null | undefined | false | Promise<T | null | undefined | false>): Promise<T> {
	for (let tries = 0; tries < 600; tries++) {
		const value = await check();
		if (value) return value;
		await new Promise((resolve) => setTimeout(resolve, 100));
	}
	throw new Error(`never came: ${what}\n${log}`);
}

before(async () => {
	if (!found) return;
	tmp = mkdtempSync(path.join(os.tmpdir(), "memsync-obsidian-"));
	vault = path.join(tmp, "sample_vault");
	cpSync(path.join(repo, "sample_vault"), vault, { recursive: true });
	env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("MEMSYNC_")));
	env.MEMSYNC_HOME = path.join(tmp, "home");
	memsync("index", vault, "--provider", "none");
	token = memsync("token", "add", "obsidian").trim();
	const port = await freePort();
	server = `http://127.0.0.1:${port}`;
	serving = spawn("memsync", ["serve", vault, "--listen", `127.0.0.1:${port}`, "--provider", "none"], { env, stdio: ["ignore", "pipe", "pipe"] });
	serving.stdout?.on("data", (chunk: Buffer) => (log += chunk.toString()));
	serving.stderr?.on("data", (chunk: Buffer) => (log += chunk.toString()));
	await until("memsync serve answering", () => answers(`${server}/api/status`));
});

after(async () => {
	for (const plugin of plugins) plugin.unloadAll();
	if (serving && serving.exitCode === null) {
		const ended = new Promise((resolve) => serving?.once("exit", resolve));
		serving.kill("SIGTERM");
		await ended;
	}
	if (tmp) rmSync(tmp, { recursive: true, force: true });
});

interface Loaded {
	app: App;
	plugin: Plugin & {
		settings: { server: string; token: string };
		saveSettings(): Promise<void>;
		refreshStatus(): Promise<void>;
		onload(): Promise<void>;
	};
}

async function loaded(folder = vault, settings: { server?: string; token?: string } = {}): Promise<Loaded> {
	const Memsync = loadPluginClass(path.join(pluginDir, "main.js"));
	const app = new App(folder);
	const manifest = JSON.parse(readFileSync(path.join(pluginDir, "manifest.json"), "utf8")) as unknown;
	const plugin = new Memsync(app, manifest) as Loaded["plugin"];
	plugin.stored = { server, token, ...settings };
	plugins.push(plugin);
	await plugin.onload();
	return { app, plugin };
}

function command(plugin: Plugin, id: string): () => unknown {
	const found = plugin.commands.find((each) => each.id === id);
	assert.ok(found, `no command ${id}`);
	return found.callback;
}

async function tested(plugin: Plugin): Promise<string> {
	const tab = plugin.settingTabs[0] as PluginSettingTab & { display(): void };
	Setting.made = [];
	tab.display();
	const test = Setting.made.find((setting) => setting.nameEl.textContent === "Test connection");
	assert.ok(test?.buttons[0]?.clicked, "no test button");
	await test.buttons[0].clicked();
	return test.descEl.textContent ?? "";
}

test("the plugin loads and registers its commands, view, ribbon icon, status bar and settings", { skip }, async () => {
	const { app, plugin } = await loaded();
	assert.deepEqual(plugin.commands.map((each) => [each.id, each.name]), [
		["search-notes", "Search notes"],
		["open-related-notes", "Open related notes"],
	]);
	assert.ok(app.views.has("memsync-related"));
	assert.deepEqual(plugin.ribbon.map((each) => each.title), ["Search notes"]);
	assert.equal(plugin.settingTabs.length, 1);
	await plugin.refreshStatus();
	const indexed = (JSON.parse(memsync("status", "--vault", vault, "--json")) as { files_indexed: number }).files_indexed;
	assert.match(plugin.statusBar[0]?.textContent ?? "", new RegExp(`^memsync: ${indexed} notes`));
	assert.equal(await tested(plugin), `Connected: memsync serves this vault (${indexed} notes indexed).`);
	const tokenField = Setting.made.find((setting) => setting.nameEl.textContent === "Token")?.texts[0];
	assert.equal(tokenField?.inputEl.type, "password");
	for (const request of sent) {
		assert.equal(request.headers?.Authorization, `Bearer ${token}`);
		assert.ok(request.url.startsWith(`${server}/api/`));
	}
});

test("the search modal lists first the note memsync query ranks first, and opens it at its lines", { skip }, async () => {
	const { app, plugin } = await loaded();
	const text = "staging redis port";
	const cli = JSON.parse(memsync("query", text, "--vault", vault, "--json")) as { results: Array<{ path: string; start_line: number; end_line: number }> };
	const best = cli.results[0];
	assert.ok(best);
	await command(plugin, "search-notes")();
	const modal = Modal.opened.at(-1) as SuggestModal<{ hit?: { path: string } }>;
	const shown = await modal.type(text);
	assert.equal(shown[0]?.item.hit?.path, best.path);
	assert.equal(shown[0]?.el.querySelector(".memsync-hit-where")?.textContent, `${best.path}:${best.start_line}-${best.end_line}`);
	const marked = [...(shown[0]?.el.querySelectorAll("mark") ?? [])].map((mark) => mark.textContent?.toLowerCase());
	assert.ok(marked.includes("redis") && marked.includes("port"), `marked: ${marked.join(", ")}`);
	const filtered = await modal.type(`${text} path:tech/`);
	assert.ok(filtered.length > 0 && filtered.every((each) => each.item.hit?.path.startsWith("tech/")));
	modal.choose(0);
	const leaf = await until("the note opened", () => app.workspace.leaves.find((each) => each.view && "editor" in each.view));
	const view = leaf.view as unknown as { file: TFile; editor: { selection: { from: { line: number } } | null } };
	assert.ok(view.file.path.startsWith("tech/"));
	assert.ok(view.editor.selection, "no lines selected");
});

test("the related pane lists what memsync related lists, then the note's links and backlinks", { skip }, async () => {
	const { app, plugin } = await loaded();
	const note = "projects/heron.md";
	const cli = JSON.parse(memsync("related", note, "--vault", vault, "--json")) as { results: Array<{ path: string; start_line: number; end_line: number }> };
	const links = JSON.parse(memsync("links", note, "--vault", vault, "--json")) as { links: unknown[]; backlinks: unknown[] };
	await command(plugin, "open-related-notes")();
	const pane = app.workspace.getLeavesOfType("memsync-related")[0]?.view as unknown as { contentEl: HTMLElement };
	assert.ok(pane, "the pane did not open");
	app.workspace.setActive(new TFile(note));
	const listed = await until("the related notes", () => {
		const items = [...pane.contentEl.querySelectorAll(".memsync-related .memsync-hit-where")];
		return pane.contentEl.querySelector(".memsync-pane-title")?.textContent === `Related to ${note}` && items.map((item) => item.textContent);
	});
	assert.deepEqual(listed, cli.results.map((hit) => `${hit.path}:${hit.start_line}-${hit.end_line}`));
	const titles = [...pane.contentEl.querySelectorAll(".memsync-section-title")].map((title) => title.textContent);
	assert.deepEqual(titles, [`Links (${links.links.length})`, `Backlinks (${links.backlinks.length})`]);
	// saved: the pane asks again once the daemon has re-indexed the note
	const asked = sent.filter((request) => request.url.includes("/api/related")).length;
	appendFileSync(path.join(vault, note), "\nMore about the heron sync.\n");
	app.vault.trigger("modify", new TFile(note));
	await until("the pane asking again", () => sent.filter((request) => request.url.includes("/api/related")).length > asked);
});

test("a wrong token, no server or another vault is one line saying so, with the commands to run", { skip }, async () => {
	const wrong = await loaded(vault, { token: "memsync_not-a-token" });
	const said = await tested(wrong.plugin);
	assert.match(said, /^Wrong token: memsync refused it \(revoked or mistyped\); make one with: memsync token add obsidian\.$/);
	assert.ok(!said.includes(token));
	await wrong.plugin.refreshStatus();
	assert.equal(wrong.plugin.statusBar[0]?.textContent, "memsync: wrong token");
	const closed = `http://127.0.0.1:${await freePort()}`;
	const away = await loaded(vault, { server: closed });
	assert.equal(await tested(away.plugin), `memsync is not running at ${closed}. Run: memsync serve "${vault}" && memsync token add obsidian`);
	await command(away.plugin, "search-notes")();
	const modal = Modal.opened.at(-1) as SuggestModal<unknown>;
	const shown = await modal.type("redis");
	assert.deepEqual([...(shown[0]?.el.querySelectorAll("pre") ?? [])].map((pre) => pre.textContent), [`memsync serve "${vault}"`, "memsync token add obsidian"]);
	const elsewhere = mkdtempSync(path.join(tmp, "other-"));
	const other = await loaded(elsewhere);
	assert.equal(await tested(other.plugin), `Another vault is served: ${vault}, not this one (${elsewhere}).`);
});
