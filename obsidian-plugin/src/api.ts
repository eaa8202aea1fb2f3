// The HTTP API of `memsync serve`, as this plugin asks it: the shapes it answers (memsync/shapes.py),
// how a request is built, and one sentence for each way it can fail. Nothing here imports Obsidian:
// the request is sent by whatever `Send` is given (requestUrl in the app, a stand-in in tests).
import { TOKEN_COMMAND } from "./vault.ts";

export interface MemsyncSettings {
	server: string;
	token: string;
}

// `memsync serve` listens here unless told otherwise (its --listen default)
export const DEFAULT_SERVER = "http://127.0.0.1:8631";
export const DEFAULT_SETTINGS: MemsyncSettings = { server: DEFAULT_SERVER, token: "" };

export interface SearchHit {
	path: string;
	start_line: number;
	end_line: number;
	score: number;
	snippet: string;
	snippet_start_line: number;
}

export interface SearchAnswer {
	query: string;
	mode: string;
	notices: string[];
	terms: string[]; // the words to mark, as the server's keyword search reads the query
	results: SearchHit[];
}

export interface RelatedAnswer {
	note: string;
	mode: string;
	notices: string[];
	results: SearchHit[];
}

export interface LinkEntry {
	path: string;
	line: number;
	link: string;
	kind: string;
	target: string;
	resolved: string | null;
}

export interface BacklinkEntry extends LinkEntry {
	text: string;
}

export interface Links {
	path: string;
	links: LinkEntry[];
	backlinks: BacklinkEntry[];
	more: string;
}

export interface ServerStatus {
	vault: string | null;
	vault_host?: string | null;
	files_indexed: number;
	chunks: number;
	chunks_pending: number;
	model: string | null; // none: an index by keyword only, where no chunk waits for a vector
	writer: { role?: string; pid?: number; host?: string } | null;
}

export interface Request {
	url: string;
	method: "GET";
	headers: Record<string, string>;
	throw: false; // a refusal is an answer to read, not an exception
}

export type Send = (request: Request) => Promise<{ status: number; text: string }>;

export type Params = Record<string, string | number | string[] | undefined>;

// why memsync could not answer; "not-running" and "no-token" come with the commands to run
export type TroubleKind = "no-token" | "not-running" | "wrong-token" | "refused" | "other-vault";

export class Trouble extends Error {
	kind: TroubleKind;

	constructor(kind: TroubleKind, message: string) {
		super(message);
		this.kind = kind;
	}
}

export function serverBase(settings: MemsyncSettings): string {
	return (settings.server.trim() || DEFAULT_SERVER).replace(/\/+$/, "");
}

export function requestFor(settings: MemsyncSettings, route: string, params: Params = {}): Request {
	const query = new URLSearchParams();
	for (const [name, value] of Object.entries(params)) {
		for (const each of Array.isArray(value) ? value : [value]) {
			if (each !== undefined && each !== "") query.append(name, String(each));
		}
	}
	const asked = query.toString();
	return {
		url: `${serverBase(settings)}${route}${asked ? `?${asked}` : ""}`,
		method: "GET",
		headers: { Authorization: `Bearer ${settings.token.trim()}` },
		throw: false,
	};
}

const TOKEN_HELP = `make one with: ${TOKEN_COMMAND}`;

// the server's own one-line reason ({"error": ...}), else the status
function refusal(status: number, text: string): string {
	try {
		const body = JSON.parse(text) as { error?: unknown };
		if (typeof body.error === "string") return body.error;
	} catch {
		// not JSON: a proxy's page, say; the status tells enough
	}
	return `HTTP ${status}`;
}

export class Client {
	private settings: () => MemsyncSettings;
	private send: Send;

	constructor(settings: () => MemsyncSettings, send: Send) {
		this.settings = settings;
		this.send = send;
	}

	async get<T>(route: string, params: Params = {}): Promise<T> {
		const settings = this.settings();
		if (!settings.token.trim()) {
			throw new Trouble("no-token", `No token set: ${TOKEN_HELP}, then paste it in this plugin's settings.`);
		}
		let answer: { status: number; text: string };
		try {
			answer = await this.send(requestFor(settings, route, params));
		} catch {
			// the error names the address only; the request's headers (the token) are never shown
			throw new Trouble("not-running", `memsync is not running at ${serverBase(settings)}.`);
		}
		if (answer.status === 401) {
			throw new Trouble("wrong-token", `Wrong token: memsync refused it (revoked or mistyped); ${TOKEN_HELP}.`);
		}
		if (answer.status >= 400) {
			throw new Trouble("refused", `memsync refused: ${refusal(answer.status, answer.text)}`);
		}
		try {
			return JSON.parse(answer.text) as T;
		} catch {
			throw new Trouble("refused", `${serverBase(settings)} did not answer as memsync does.`);
		}
	}

	search(q: string, path: string[], tag: string[]): Promise<SearchAnswer> {
		return this.get<SearchAnswer>("/api/search", { q, path, tag });
	}

	related(location: string): Promise<RelatedAnswer> {
		return this.get<RelatedAnswer>("/api/related", { location });
	}

	links(location: string): Promise<Links> {
		return this.get<Links>("/api/links", { location });
	}

	status(): Promise<ServerStatus> {
		return this.get<ServerStatus>("/api/status");
	}
}

// One short line for the status bar.
export function statusLine(status: ServerStatus): string {
	const parts = [`memsync: ${status.files_indexed} notes`];
	if (status.model && status.chunks_pending > 0) parts.push(`${status.chunks_pending} chunks wait for vectors`);
	if (status.writer?.role) parts.push(`writer: memsync ${status.writer.role}`);
	return parts.join(" · ");
}
