import assert from "node:assert/strict";
import { test } from "node:test";
import { Latest } from "../src/later.ts";
import { installDom } from "./standin.ts";

test("keystrokes within the pause ask once, and every keystroke gets that answer", async () => {
	installDom();
	const latest = new Latest<string>(20);
	const asked: string[] = [];
	const ask = (text: string) => latest.run(async () => {
		asked.push(text);
		return `answer to ${text}`;
	});
	const answers = await Promise.all([ask("h"), ask("he"), ask("her")]);
	assert.deepEqual(asked, ["her"]);
	assert.deepEqual(answers, ["answer to her", "answer to her", "answer to her"]);
	assert.equal(await ask("heron"), "answer to heron");
});
