// Debouncing a question: the last one asked within `wait` ms runs, and every caller who asked
// meanwhile gets its answer (a search modal awaits each keystroke's promise).
export class Latest<T> {
	private wait: number;
	private timer: number | undefined;
	private waiting: Array<{ resolve: (value: T) => void; reject: (error: unknown) => void }> = [];

	constructor(wait: number) {
		this.wait = wait;
	}

	run(work: () => Promise<T>): Promise<T> {
		window.clearTimeout(this.timer);
		return new Promise<T>((resolve, reject) => {
			this.waiting.push({ resolve, reject });
			this.timer = window.setTimeout(() => {
				const answered = this.waiting;
				this.waiting = [];
				work().then(
					(value) => answered.forEach((each) => each.resolve(value)),
					(error: unknown) => answered.forEach((each) => each.reject(error)),
				);
			}, this.wait);
		});
	}

	cancel(): void {
		window.clearTimeout(this.timer);
	}
}
