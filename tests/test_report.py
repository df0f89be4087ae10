#!/usr/bin/env python3
# tests/test_report.py: `mnemo report` in headless Chromium: the page renders (its
# JS writes a status marker), logs no console error, and shows the replay's numbers.
"""Usage: test_report.py MNEMO_CLI TRACE

Exits 77 (skipped) when no chromium is installed. Checks:
  * the page is self-contained (no external URL is loaded);
  * Chromium renders it: the status marker says "rendered", the error box is
    empty, stderr holds no console message;
  * the peaks the page computes from its timeline equal `mnemo replay --json`'s,
    and so does every row of the config table;
  * a page whose script throws is caught (status "error"), so the check is live.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CONFIGS = ["", "expandable_segments:True"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def dump_dom(browser, page, profile):
    r = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                        "--virtual-time-budget=5000", "--dump-dom", "file://" + os.path.abspath(page)],
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        raise SystemExit(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout, r.stderr


def attr(dom, elem_id, name):
    m = re.search(r'<[^>]*\bid="%s"[^>]*>' % re.escape(elem_id), dom)
    if not m:
        return None
    a = re.search(r'\b%s="([^"]*)"' % re.escape(name), m.group(0))
    return a.group(1) if a else None


def main():
    cli, trace = sys.argv[1], sys.argv[2]
    browser = chromium()
    if not browser:
        print("SKIPPED: chromium is not installed (scripts/deps.sh installs it)")
        return 77
    fails = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        cargs = []
        for c in CONFIGS:
            cargs += ["--config", c]
        rep = subprocess.run([cli, "replay", trace, "--json", "--no-progress"] + cargs, capture_output=True, text=True,
                             check=True)
        runs = json.loads(rep.stdout)
        page = os.path.join(tmp, "report.html")
        out = subprocess.run([cli, "report", trace, "-o", page] + cargs, capture_output=True, text=True)
        check(out.returncode == 0, f"mnemo report exits 0 ({out.stderr.strip()[:200]})")
        html = open(page, encoding="utf-8").read()
        external = re.findall(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//|@import|<link\b', html)
        check(not external, f"self-contained: no external resource ({external[:3]})")
        check(str(runs[0]["peak_reserved"]) in out.stdout, "the summary on stdout gives the replay's peak reserved")

        data = json.loads(re.search(r'<script id="mn-data" type="application/json">(.*?)</script>', html,
                                    re.S).group(1))
        active = sum(1 for seg in data["segments"] for b in seg["blocks"] if b[2] != 2)
        check(active == data["live_at_peak"] and data["live_at_peak"] > 0,
              f"live allocations at the peak: trace walk {data['live_at_peak']} == snapshot's active blocks {active}")
        check(sum(seg["size"] for seg in data["segments"]) == runs[0]["peak_reserved"],
              "the segments at the peak add up to the peak reserved")
        dom, err = dump_dom(browser, page, os.path.join(tmp, "profile"))
        check(attr(dom, "mn-status", "data-status") == "rendered", "the page's script ran to the end (status rendered)")
        m = re.search(r'id="mn-errors"[^>]*>([^<]*)<', dom)
        check(m is not None and m.group(1).strip() == "", "no error caught by window.onerror")
        console = [l for l in err.splitlines() if "CONSOLE" in l]
        check(not console, f"no console message ({console[:2]})")
        check(attr(dom, "mn-peak-reserved", "data-bytes") == str(runs[0]["peak_reserved"]),
              f"page peak reserved {attr(dom, 'mn-peak-reserved', 'data-bytes')} == replay {runs[0]['peak_reserved']}")
        check(attr(dom, "mn-peak-allocated", "data-bytes") == str(runs[0]["peak_allocated"]),
              f"page peak allocated {attr(dom, 'mn-peak-allocated', 'data-bytes')} == replay {runs[0]['peak_allocated']}")
        rows = re.findall(r'<tr data-peak-reserved="(\d+)"', dom)
        check(rows == [str(r["peak_reserved"]) for r in runs],
              f"config table rows {rows} == replay {[r['peak_reserved'] for r in runs]}")
        check("<svg" in dom and 'id="mn-timeline-svg"' in dom and "<polyline" in dom, "timeline SVG drawn")
        check('id="mn-segmap-svg"' in dom and "<rect" in dom, "segment map drawn")
        nseg = attr(dom, "segsum", "data-segments")
        check(nseg is not None and int(nseg) > 0, f"segment map holds {nseg} segments")

        # A page whose data is broken must show the error marker (the check above is live).
        bad = html.replace('"timeline": [', '"timeline": 5, "x": [', 1)
        bad_page = os.path.join(tmp, "bad.html")
        open(bad_page, "w", encoding="utf-8").write(bad)
        dom2, _ = dump_dom(browser, bad_page, os.path.join(tmp, "profile2"))
        check(attr(dom2, "mn-status", "data-status") == "error", "a throwing page is reported (status error)")
    print(f"{len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
