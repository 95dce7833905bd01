// Drives osm-server's dashboard in headless Chromium for
// e2e/dashboard_test.go. Environment:
//   PLAYWRIGHT_DIR  directory holding node_modules/playwright-core (hack/install-playwright.sh)
//   DASHBOARD_URL   the page, with #token=<admin token>
//   APPLY           JSON array: the command that changes the split (osm-server apply ...)
//   SCREENSHOT      where to save the screenshot (PNG)
// It exits non-zero, saying what it did not find, on any failed check.
import { execFileSync } from "node:child_process";
import { fail, open } from "./chromium.mjs";

const { browser, page, errors } = await open();
try {
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(process.env.DASHBOARD_URL);

  const buyerEdge = '[data-edge="default/bookbuyer -> default/bookstore"]';
  await page.waitForSelector(buyerEdge, { state: "attached", timeout: 15000 });
  if (await page.locator('[data-edge="default/bookthief -> default/bookstore"]').count() !== 0) fail("the graph shows bookthief -> bookstore");
  if (await page.locator('[data-node="default/bookthief"]').count() !== 1) fail("the graph has no bookthief node");
  if (!page.url().endsWith("/dashboard/")) fail("the token stayed in the URL: " + page.url());

  const weight = (svc) => page.locator(`[data-split="default/bookstore"] [data-backend="${svc}"] .weight`);
  await page.waitForFunction(() => document.querySelector('[data-split="default/bookstore"]'), null, { timeout: 15000 });
  const before = await weight("default/bookstore-v1").textContent();
  console.log("split before: bookstore-v1 weight " + before);
  await page.evaluate(() => { window.__sameDocument = true; });

  execFileSync(JSON.parse(process.env.APPLY)[0], JSON.parse(process.env.APPLY).slice(1), { stdio: "inherit" });
  await page.waitForFunction(() => {
    const w = document.querySelector('[data-split="default/bookstore"] [data-backend="default/bookstore-v1"] .weight');
    return w && w.textContent === "50";
  }, null, { timeout: 15000 });
  if (!(await page.evaluate(() => window.__sameDocument === true))) fail("the page reloaded to show the split change");
  console.log("split after: bookstore-v1 weight " + (await weight("default/bookstore-v1").textContent()));

  // Failure handling: bookstore's effective policy with each part's
  // source, the backend bookbuyer's Envoy ejected, and the note on the
  // proxyless caller.
  await page.waitForSelector('[data-ejected="default/bookstore 127.0.0.9:14001"]', { state: "attached", timeout: 15000 });
  await page.selectOption("#resilience-service", "default/bookstore");
  const od = '[data-testid="resilience-cluster"] [data-part="outlierDetection"]';
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes("BackendTrafficPolicy default/bookstore"), od, { timeout: 15000 });
  const odText = await page.locator(od).textContent();
  if (!odText.includes("3 consecutive gateway errors")) fail("bookstore's outlier detection shows " + odText);
  const ct = await page.locator('[data-testid="resilience-cluster"] [data-part="connectTimeout"]').textContent();
  if (!ct.includes("MeshConfig default")) fail("bookstore's connect timeout shows " + ct);
  const ejected = await page.locator('[data-testid="resilience-ejected"]').textContent();
  if (!ejected.includes("127.0.0.9:14001") || !ejected.includes("default/bookbuyer")) fail("bookstore's ejected backends show " + ejected);
  const proxyless = await page.locator('[data-testid="resilience-proxyless"]').textContent();
  if (!proxyless.includes("default/bookbuyer")) fail("the proxyless caller's note shows " + proxyless);
  const retry = await page.locator('[data-call="default/bookbuyer 14001"] [data-part="retry"]').textContent();
  if (!retry.includes("MeshConfig default")) fail("bookbuyer's retry to bookstore shows " + retry);
  console.log("failure handling: " + odText + " | ejected: " + ejected);

  for (const id of ["services", "proxies", "certificates", "providers"]) {
    if ((await page.locator(`#${id} tr`).count()) < 2) fail(`the ${id} table is empty`);
  }
  const offsite = requests.filter((u) => !u.startsWith(new URL(process.env.DASHBOARD_URL).origin));
  if (offsite.length) fail("the page fetched from elsewhere: " + offsite.join(", "));
  if (errors.length) fail("the page logged errors: " + errors.join("; "));
  await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  await page.locator("#resilience").screenshot({ path: process.env.SCREENSHOT.replace(/\.png$/, "-resilience.png") });
  console.log("screenshot: " + process.env.SCREENSHOT);
} finally {
  await browser.close();
}
