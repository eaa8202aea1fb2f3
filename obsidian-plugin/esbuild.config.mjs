// Builds src/main.ts into main.js as Obsidian loads it (CommonJS; obsidian itself from the app).
import esbuild from "esbuild";
import { builtinModules } from "node:module";

await esbuild.build({
	entryPoints: ["src/main.ts"],
	bundle: true,
	external: ["obsidian", "electron", "@codemirror/*", "@lezer/*", ...builtinModules],
	format: "cjs",
	target: "es2018",
	logLevel: "warning",
	treeShaking: true,
	minify: false,
	outfile: "main.js",
});
