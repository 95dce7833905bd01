// Measures osm-server's dashboard with many services, for
// e2e/dashboard_scale_test.go. Environment:
//   PLAYWRIGHT_DIR  directory holding node_modules/playwright-core (hack/install-playwright.sh)
//   DASHBOARD_URL   the page, with #token=<admin token>
//   SERVICES        how many services the mesh has
//   APPLY           JSON array: the command that changes the first split to 50/50
//   SCREENSHOT      where to save the screenshot (PNG)
// It checks that every service is drawn and listed and that the split
// change appears without a reload, and prints what it measured; it asserts
// no time.
import { execFileSync } from "node:child_process";
import { fail, open } from "./chromium.mjs";

const n = Number(process.env.SERVICES);
const { browser, page, errors } = await open();
try {
  // Load to rendered: from navigation to every service in the graph and
  // the table; three loads (the token stays in the tab's session storage),
  // of which the median is reported.
  const loads = [];
  for (let i = 0; i < 3; i++) {
    const start = Date.now();
    if (i === 0) await page.goto(process.env.DASHBOARD_URL);
    else await page.reload();
    // A script error fails at once rather than at the timeout.
    await Promise.race([
      page.waitForFunction((n) => document.querySelectorAll("#graph [data-node]").length === n &&
        document.querySelectorAll("#services tr").length === n + 1, n, { timeout: 120000, polling: "raf" }),
      new Promise((_, reject) => page.once("pageerror", (e) => reject(new Error("the page failed: " + e.message)))),
    ]);
    loads.push(Date.now() - start);
  }
  const loadMillis = [...loads].sort((a, b) => a - b)[1];
  const nodes = await page.locator("#graph [data-node]").count();
  const rows = (await page.locator("#services tr").count()) - 1;
  if (nodes !== n) fail(`the graph has ${nodes} services, want ${n}`);
  if (rows !== n) fail(`the services table has ${rows} rows, want ${n}`);
  const edges = await page.locator("#graph [data-edge]").count();

  // Steady state: 3 s of polls with nothing changing.
  const before = await page.evaluate(() => ({ ...window.osmDashboard }));
  await page.waitForTimeout(3000);
  const steady = await page.evaluate(() => ({ ...window.osmDashboard }));

  // An update: the split change, from the command's return to the page
  // showing it; and the page's own render time for it.
  await page.evaluate(() => { window.__sameDocument = true; });
  const weight = '[data-split="scale/svc-0000"] [data-backend="scale/svc-0001"] .weight';
  execFileSync(JSON.parse(process.env.APPLY)[0], JSON.parse(process.env.APPLY).slice(1), { stdio: "inherit" });
  const applied = Date.now();
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === "50", weight, { timeout: 30000, polling: "raf" });
  const updateMillis = Date.now() - applied;
  if (!(await page.evaluate(() => window.__sameDocument === true))) fail("the page reloaded to show the split change");
  const after = await page.evaluate(() => ({ ...window.osmDashboard }));

  const state = await page.evaluate(() => {
    const e = performance.getEntriesByType("resource").filter((r) => r.name.endsWith("/debug/dashboard"));
    const last = e.filter((r) => r.responseStatus === 200).pop();
    return { fetches: e.length, notModified: e.filter((r) => r.responseStatus === 304).length, lastBytes: last?.encodedBodySize, lastFetchMillis: last ? Math.round(last.duration) : null };
  });
  await page.screenshot({ path: process.env.SCREENSHOT });
  if (errors.length) fail("the page logged errors: " + errors.join("; "));
  console.log("measured: " + JSON.stringify({
    services: n, edges, loadMillis, loads,
    firstRender: before.firstRender,
    steadyRendersIn3s: steady.renders - before.renders, steadyRenderMillis: steady.renderMillis - before.renderMillis,
    updateVisibleMillis: updateMillis, updateRender: after.last,
    stateBytes: state.lastBytes, stateFetchMillis: state.lastFetchMillis, fetches: state.fetches, notModified: state.notModified,
  }));
} finally {
  await browser.close();
}
