import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, Trouble, requestFor, statusLine, type Request } from "../src/api.ts";

const settings = { server: "http://127.0.0.1:8631/", token: " memsync_abc " };

test("a request is a GET with the token as Bearer and the filters repeated as the API reads them", () => {
	const request = requestFor(settings, "/api/search", { q: "heron sync", path: ["projects/", "daily/"], tag: [], n: 5, since: undefined });
	assert.equal(request.url, "http://127.0.0.1:8631/api/search?q=heron+sync&path=projects%2F&path=daily%2F&n=5");
	assert.deepEqual(request.headers, { Authorization: "Bearer memsync_abc" });
	assert.equal(request.method, "GET");
	assert.equal(request.throw, false);
});

test("a note's location is sent whole, whatever it holds", () => {
	const request = requestFor(settings, "/api/related", { location: "笔记/测试 #1.md" });
	assert.equal(new URL(request.url).searchParams.get("location"), "笔记/测试 #1.md");
});

function answering(status: number, text: string, seen: Request[] = []) {
	return new Client(
		() => settings,
		async (request) => {
			seen.push(request);
			return { status, text };
		},
	);
}

async function trouble(promise: Promise<unknown>): Promise<Trouble> {
	try {
		await promise;
	} catch (error) {
		assert.ok(error instanceof Trouble);
		return error;
	}
	assert.fail("no trouble");
}

test("each way of failing is one line, and none shows the token", async () => {
	const refused = new Client(() => settings, () => Promise.reject(new Error("net::ERR_CONNECTION_REFUSED")));
	const cases: Array<[Client, string, RegExp]> = [
		[refused, "not-running", /^memsync is not running at http:\/\/127\.0\.0\.1:8631\.$/],
		[answering(401, '{"error": "the token is not valid"}'), "wrong-token", /^Wrong token: .*memsync token add obsidian/],
		[answering(403, '{"error": "this server does not answer to the host \'x\'"}'), "refused", /^memsync refused: this server does not answer/],
		[answering(502, "<html>Bad gateway</html>"), "refused", /^memsync refused: HTTP 502$/],
		[answering(200, "<html>not memsync</html>"), "refused", /did not answer as memsync does/],
		[new Client(() => ({ ...settings, token: "" }), () => Promise.reject(new Error("unsent"))), "no-token", /^No token set/],
	];
	for (const [client, kind, message] of cases) {
		const failed = await trouble(client.status());
		assert.equal(failed.kind, kind);
		assert.match(failed.message, message);
		assert.ok(!failed.message.includes("memsync_abc"));
		assert.ok(!failed.message.includes("\n"));
	}
});

test("the answer is the server's JSON", async () => {
	const seen: Request[] = [];
	const answer = await answering(200, '{"query": "x", "terms": ["x"], "results": []}', seen).search("x", [], ["ops"]);
	assert.deepEqual(answer.terms, ["x"]);
	assert.equal(seen[0]?.url, "http://127.0.0.1:8631/api/search?q=x&tag=ops");
});

test("the status bar says notes, chunks waiting and the writer, in one line", () => {
	const status = { vault: "/v", files_indexed: 81, chunks: 220, chunks_pending: 12, model: "e5", writer: { role: "serve", pid: 7 } };
	assert.equal(statusLine(status), "memsync: 81 notes · 12 chunks wait for vectors · writer: memsync serve");
	assert.equal(statusLine({ ...status, chunks_pending: 0, writer: null }), "memsync: 81 notes");
	// an index made without a model waits for nothing
	assert.equal(statusLine({ ...status, model: null, writer: null }), "memsync: 81 notes");
});
