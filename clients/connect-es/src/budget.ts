/** Settings of a {@link RetryBudget}; every field has the Go kit's default. */
export interface RetryBudgetSettings {
  /** The window the budget remembers, in milliseconds: 1,000 to 60,000; default 10,000. */
  readonly windowMs?: number;
  /** Retries each logical call pays for: 0 to 10; default 0.1 (retries add at most 10%). */
  readonly percent?: number;
  /** A floor of retries per second allowed whatever the traffic: default 5. */
  readonly minRetriesPerSecond?: number;
}

const slices = 10;
const scale = 1000;

/**
 * A retry budget for one target, as the Go kit's `policy.Budget`: every
 * logical call deposits, every run after a call's first withdraws, over a
 * sliding window, with a small floor; resolves cost nothing. Under total
 * failure retries fall to `percent` of the traffic plus the floor.
 */
export class RetryBudget {
  private readonly slice: number;
  private readonly deposits: number;
  private readonly withdrawal: number;
  private readonly reserve: number;
  private readonly buckets: number[] = new Array<number>(slices).fill(0);
  private cur = 0;
  private curStart: number;
  private sum = 0;

  /**
   * Returns a budget with the given settings.
   *
   * @param settings - the window, the percent and the floor; defaults as the Go kit's.
   * @param now - the clock, in milliseconds; default `Date.now` (tests give their own).
   * @throws RangeError when a setting is out of its range.
   */
  constructor(settings: RetryBudgetSettings = {}, private readonly now: () => number = Date.now) {
    const windowMs = settings.windowMs ?? 10_000;
    const percent = settings.percent ?? 0.1;
    const floor = settings.minRetriesPerSecond ?? 5;
    if (!(windowMs >= 1000 && windowMs <= 60_000) || !(percent >= 0 && percent <= 10) || !(floor >= 0 && floor <= 1e6)) {
      throw new RangeError("RetryBudget: windowMs must be 1000 to 60000, percent 0 to 10, minRetriesPerSecond 0 to 1e6");
    }
    this.slice = windowMs / slices;
    this.deposits = percent === 0 ? 0 : scale;
    this.withdrawal = percent === 0 ? scale : Math.max(1, Math.round(scale / percent));
    this.reserve = Math.round(floor * (windowMs / 1000) * this.withdrawal);
    this.curStart = now();
  }

  private advance(t: number): void {
    if (t < this.curStart + this.slice) {
      return;
    }
    const n = Math.floor((t - this.curStart) / this.slice);
    if (n >= slices) {
      this.buckets.fill(0);
      this.sum = 0;
    } else {
      for (let i = 0; i < n; i++) {
        this.cur = (this.cur + 1) % slices;
        this.sum -= this.buckets[this.cur]!;
        this.buckets[this.cur] = 0;
      }
    }
    this.curStart += n * this.slice;
  }

  /** Records one logical call. */
  deposit(): void {
    this.advance(this.now());
    this.buckets[this.cur]! += this.deposits;
    this.sum += this.deposits;
  }

  /** Spends one retry and reports whether the budget allowed it. */
  tryWithdraw(): boolean {
    this.advance(this.now());
    if (this.sum + this.reserve < this.withdrawal) {
      return false;
    }
    this.buckets[this.cur]! -= this.withdrawal;
    this.sum -= this.withdrawal;
    return true;
  }
}
