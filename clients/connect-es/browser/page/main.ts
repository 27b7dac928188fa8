// The browser test's page: keyed payments through connect-web with the
// kit's interceptor; each logical call's outcome in a table. The page's
// server (browser.test.ts) proxies the calls to opledger serve, which loses
// some answers after it committed them.

import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

import { Payments } from "../../gen/payments_pb.js";
import { createKeyedInterceptor, KeyedCallError, newKey, withKey, type CallInfo } from "../../src/index.js";

// How each logical call ended, by its key.
const ends = new Map<string, CallInfo>();
const transport = createConnectTransport({
  baseUrl: window.location.origin,
  interceptors: [
    createKeyedInterceptor({
      maxRuns: 8,
      backoff: { initialMs: 10, maxMs: 100 },
      onCallEnd: (info) => ends.set(info.key, info),
    }),
  ],
});
const payments = createClient(Payments, transport);

function cell(row: HTMLTableRowElement, text: string, cls = ""): void {
  const td = row.insertCell();
  td.textContent = text;
  if (cls !== "") {
    td.className = cls;
  }
}

async function pay(i: number, body: HTMLTableSectionElement): Promise<void> {
  const reference = `web-${i}`;
  // One key per payment: made when the payment is, kept by every retry.
  const key = newKey();
  const row = body.insertRow();
  row.dataset["reference"] = reference;
  row.dataset["key"] = key;
  cell(row, reference);
  cell(row, key.slice(0, 18) + "…");
  try {
    const r = await payments.transfer(
      { fromAccount: "browser", toAccount: "shop", amountCents: BigInt(100 + i), reference },
      { contextValues: withKey(key), timeoutMs: 30_000 },
    );
    const info = ends.get(key);
    cell(row, info?.outcome.name ?? "?", "ok");
    cell(row, `${info?.runs ?? 0} run(s), ${info?.resolves ?? 0} resolve(s)`);
    cell(row, `transfer ${r.transferId}`);
    row.dataset["outcome"] = info?.outcome.name ?? "?";
    row.dataset["transfer"] = String(r.transferId);
  } catch (e) {
    const o = e instanceof KeyedCallError ? e.outcome : undefined;
    cell(row, o === undefined ? "error" : `${o.name} (committed: ${o.committed}; next: ${o.next})`, "failed");
    cell(row, e instanceof KeyedCallError ? `${e.runs} run(s), ${e.resolves} resolve(s)` : "");
    cell(row, e instanceof Error ? e.message : String(e));
    row.dataset["outcome"] = o?.name ?? "error";
  }
}

async function payAll(n: number): Promise<void> {
  const body = document.querySelector<HTMLTableSectionElement>("#calls tbody")!;
  const status = document.querySelector<HTMLElement>("#status")!;
  status.textContent = `paying ${n} transfers…`;
  await Promise.all(Array.from({ length: n }, (_, i) => pay(i, body)));
  const rows = [...body.rows].sort((a, b) => a.dataset["reference"]!.localeCompare(b.dataset["reference"]!, "en", { numeric: true }));
  body.append(...rows);
  const by = new Map<string, number>();
  for (const r of rows) {
    const o = r.dataset["outcome"] ?? "";
    by.set(o, (by.get(o) ?? 0) + 1);
  }
  status.textContent = `${n} logical calls: ` + [...by].map(([k, v]) => `${v} ${k}`).join(", ");
  document.body.dataset["done"] = "true";
}

document.querySelector<HTMLButtonElement>("#pay")!.addEventListener("click", () => {
  void payAll(Number(new URLSearchParams(window.location.search).get("n") ?? "20"));
});
