// Which vault the server serves, against this one; and the commands that serve this one. Paths the
// API gives are relative to the vault, with "/" between folders, as Obsidian's own are: they map
// one to one once both name the same vault.

export interface ThisVault {
	base: string | null; // its folder on this machine; null where the app gives none (mobile)
	name: string;
}

function normalized(path: string): string {
	const slashed = path.replace(/\\/g, "/");
	const trimmed = slashed.length > 1 ? slashed.replace(/\/+$/, "") : slashed;
	// Windows paths: any case names the same folder
	return /^[A-Za-z]:\//.test(trimmed) ? trimmed.toLowerCase() : trimmed;
}

export function folderName(path: string): string {
	const parts = normalized(path).split("/");
	return parts[parts.length - 1] ?? "";
}

// How the served vault stands to this one: "same" (the same folder), "named" (another folder of
// the same name: this vault served from another machine, or a copy) or "other".
export function served(servedPath: string | null, here: ThisVault): "same" | "named" | "other" {
	if (!servedPath) return "other";
	if (here.base !== null && normalized(servedPath) === normalized(here.base)) return "same";
	const name = folderName(servedPath);
	return name === here.name || name.toLowerCase() === here.name.toLowerCase() ? "named" : "other";
}

// A path as a shell takes it in double quotes: POSIX shells expand $ ` \ " inside them;
// on Windows a backslash is a folder separator and stays.
export function quoted(path: string, windows: boolean): string {
	return windows ? `"${path}"` : `"${path.replace(/(["$`\\])/g, "\\$1")}"`;
}

export const TOKEN_COMMAND = "memsync token add obsidian";

// The commands that serve this vault and make the plugin's token, to run in a terminal.
export function serveCommands(here: ThisVault, windows: boolean): string[] {
	const where = here.base === null ? `"<the folder of the vault ${here.name}>"` : quoted(here.base, windows);
	return [`memsync serve ${where}`, TOKEN_COMMAND];
}
