// Obsidian's own review rules (eslint-plugin-obsidianmd, recommended) over the plugin's sources;
// the tests run in Node with a stand-in for the app, so only the type-checked rules apply there.
import tseslint from "typescript-eslint";
import obsidianmd from "eslint-plugin-obsidianmd";
import globals from "globals";
import { globalIgnores } from "eslint/config";

export default tseslint.config(
	{
		languageOptions: {
			globals: { ...globals.browser },
			parserOptions: {
				projectService: { allowDefaultProject: ["manifest.json"] },
				tsconfigRootDir: import.meta.dirname,
				extraFileExtensions: [".json"],
			},
		},
	},
	...obsidianmd.configs.recommended,
	{
		rules: {
			// the declarative settings API is Obsidian 1.13's; the `obsidian` types this linter
			// pins (1.8.7) have none, and minAppVersion 1.5.0 needs display() (require-display)
			"obsidianmd/settings-tab/prefer-setting-definitions": "off",
		},
	},
	globalIgnores(["node_modules", "dist", "main.js", "esbuild.config.mjs", "eslint.config.mjs", "versions.json", "test"]),
);
