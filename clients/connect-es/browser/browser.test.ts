// The client in a real browser: a page bundled with esbuild makes keyed
// payments through connect-web in headless Chromium, against opledger serve
// losing answers after commit; the page shows each call's outcome and the
// test checks one transfer per logical call in serve's database.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";
import { chromium } from "playwright-core";

import { startServe } from "../test/serve.js";

const pkg = fileURLToPath(new URL("../../", import.meta.url));

/** The page's server: the page, its bundle, and the service's calls proxied to serve with the bearer token. */
function pageServer(dir: string, connect: string, token: string): Promise<{ url: string; server: Server }> {
  const target = new URL(connect);
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    if (req.method === "GET" && (path === "/" || path === "/bundle.js")) {
      const file = path === "/" ? join(pkg, "browser/page/index.html") : join(dir, "bundle.js");
      res.writeHead(200, { "content-type": path === "/" ? "text/html; charset=utf-8" : "text/javascript" });
      res.end(readFileSync(file));
      return;
    }
    if (req.method !== "POST" || !path.startsWith("/opledger.examples.payments.v1.Payments/")) {
      res.writeHead(404).end();
      return;
    }
    const headers = { ...req.headers, host: target.host, authorization: "Bearer " + token };
    const up = request({ host: target.hostname, port: target.port, method: "POST", path: req.url, headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const a = server.address();
      resolve({ url: `http://127.0.0.1:${typeof a === "object" && a !== null ? a.port : 0}/`, server });
    });
  });
}

test("keyed payments from headless Chromium through connect-web: one transfer per logical call, each call's outcome on the page", { timeout: 180_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "opledger-connect-es-page-"));
  const serve = await startServe("--faults", "0.3", "--faults-seed", "42");
  const { url, server } = await pageServer(dir, serve.connect, serve.token);
  const browser = await chromium.launch({
    executablePath: process.env["CHROMIUM"] ?? "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    await build({
      entryPoints: [join(pkg, "browser/page/main.ts")],
      bundle: true,
      format: "esm",
      target: "es2022",
      outfile: join(dir, "bundle.js"),
      logLevel: "silent",
    });
    const page = await browser.newPage({ viewport: { width: 1000, height: 620 } });
    const n = 24;
    await page.goto(url + "?n=" + n);
    await page.click("#pay");
    await page.waitForSelector("body[data-done=true]", { timeout: 120_000 });
    const rows = await page.$$eval("#calls tbody tr", (trs) => trs.map((tr) => ({ ...(tr as HTMLElement).dataset })));
    const shot = process.env["OPLEDGER_UPDATE_SCREENSHOT"] === "1" ? join(pkg, "testdata/browser.png") : join(pkg, "dist/browser.png");
    mkdirSync(join(shot, ".."), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    t.diagnostic(`screenshot: ${shot}; ${await page.textContent("#status")}`);

    assert.equal(rows.length, n);
    const db = serve.transfers();
    let replayed = 0;
    for (const r of rows) {
      assert.ok(r["outcome"] === "executed" || r["outcome"] === "replayed", `${r["reference"]}: ${r["outcome"]}`);
      replayed += r["outcome"] === "replayed" ? 1 : 0;
      const ids = db.get(r["reference"]!) ?? [];
      assert.equal(ids.length, 1, `${r["reference"]}: ${ids.length} transfers`);
      assert.equal(String(ids[0]), r["transfer"], `${r["reference"]}: the page's answer is the transfer`);
    }
    assert.equal(db.size, n, "transfers beyond the page's calls");
    assert.ok(replayed > 0, "no answer was lost: --faults did not run");
  } finally {
    await browser.close();
    server.close();
    await serve.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
