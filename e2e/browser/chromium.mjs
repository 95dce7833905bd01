// What the browser scripts share: Debian's Chromium through playwright-core
// (found in PLAYWRIGHT_DIR, hack/install-playwright.sh), a page that
// records its errors, and a failure that names what was not found.
import { createRequire } from "node:module";

const require = createRequire(process.env.PLAYWRIGHT_DIR + "/");
const { chromium } = require("playwright-core");

// fail reports a failed check; the script exits non-zero.
export const fail = (msg) => { console.error("FAIL: " + msg); process.exitCode = 1; };

// open launches headless Chromium and returns it, a page and the errors
// the page logs (filled in as they happen).
export async function open() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  return { browser, page, errors };
}
