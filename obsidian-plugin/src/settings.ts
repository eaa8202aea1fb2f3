import { App, PluginSettingTab, Setting } from "obsidian";
import { DEFAULT_SERVER } from "./api.ts";
import { TOKEN_COMMAND } from "./vault.ts";
import type MemsyncPlugin from "./main.ts";

export class MemsyncSettingTab extends PluginSettingTab {
	private plugin: MemsyncPlugin;

	constructor(app: App, plugin: MemsyncPlugin) {
		super(app, plugin);
		this.plugin = plugin;
	}

	display(): void {
		const { containerEl } = this;
		containerEl.empty();
		new Setting(containerEl)
			.setName("Server address")
			.setDesc(`Where memsync serve answers (by default ${DEFAULT_SERVER}, this computer).`)
			.addText((text) =>
				text
					.setPlaceholder(DEFAULT_SERVER)
					.setValue(this.plugin.settings.server)
					.onChange(async (value) => {
						this.plugin.settings.server = value.trim();
						await this.plugin.saveSettings();
					}),
			);
		new Setting(containerEl)
			.setName("Token")
			.setDesc(
				createFragment((desc) => {
					desc.appendText("Paste what ");
					desc.createEl("code", { text: TOKEN_COMMAND });
					desc.appendText(" printed. It is kept in this plugin's data and sent to that server only.");
				}),
			)
			.addText((text) => {
				text.inputEl.type = "password";
				text.setValue(this.plugin.settings.token).onChange(async (value) => {
					this.plugin.settings.token = value.trim();
					await this.plugin.saveSettings();
				});
			});
		const test = new Setting(containerEl)
			.setName("Test connection")
			.setDesc("Asks the server whether it answers, takes the token and serves this vault.");
		test.addButton((button) =>
			button.setButtonText("Test").onClick(async () => {
				test.setDesc("Asking…");
				test.setDesc(await this.plugin.testConnection());
			}),
		);
	}
}
