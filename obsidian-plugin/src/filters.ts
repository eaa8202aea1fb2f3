// What is typed in the search box: the words to search for, and filters written as
// `path:FOLDER` and `tag:TAG` (also `#TAG`), sent as /api/search's `path` and `tag`.
// A value with spaces goes in double quotes: path:"Daily notes/".

export interface Asked {
	q: string;
	path: string[];
	tag: string[];
}

const PIECE = /(path|tag):"([^"]*)"?|(path|tag):(\S+)|#([^\s#]+)|(\S+)/g;

export function parseAsked(typed: string): Asked {
	const asked: Asked = { q: "", path: [], tag: [] };
	const words: string[] = [];
	for (const match of typed.matchAll(PIECE)) {
		const [, quotedKey, quotedValue, key, value, hashTag, word] = match;
		if (quotedKey !== undefined && quotedValue) asked[quotedKey as "path" | "tag"].push(quotedValue);
		else if (key !== undefined && value !== undefined) asked[key as "path" | "tag"].push(value);
		else if (hashTag !== undefined) asked.tag.push(hashTag);
		else if (word !== undefined) words.push(word);
	}
	asked.q = words.join(" ");
	return asked;
}
