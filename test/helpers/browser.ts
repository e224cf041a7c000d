// Headless Chromium from the machine's packages (Debian's `chromium`), driven by puppeteer-core,
// which downloads no browser of its own: for the page's browser test and its benchmark.
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';

const NAMES = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'];

/** The browser to drive: $BERTH_CHROMIUM, else the first of NAMES on $PATH; a clear error when none is. */
export function findChromium(): string {
  const explicit = process.env['BERTH_CHROMIUM'];
  if (explicit) return explicit;
  for (const dir of (process.env['PATH'] ?? '').split(path.delimiter))
    for (const name of NAMES) {
      const file = path.join(dir, name);
      try {
        accessSync(file, constants.X_OK);
        return file;
      } catch {
        // not here
      }
    }
  throw new Error(
    `no Chromium found (looked for ${NAMES.join(', ')} on PATH): install it (apt-get install -y chromium, ` +
      'which .ci/run does) or set BERTH_CHROMIUM to its path; the browser tests do not run without one',
  );
}

export function launchBrowser(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: findChromium(),
    headless: true,
    // As root (CI, containers) Chromium refuses its sandbox; the page it loads is our own, on loopback.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}
