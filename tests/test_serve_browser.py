"""The demo page of `hf-laser serve` in a real headless browser: the system's Chromium driven by Selenium (Debian:
`apt-get install chromium chromium-driver`; `.ci/run` installs them). The page is loaded from a real server on
127.0.0.1, the sentences are compared through the API, and the neighbours and scores it shows are checked against
`LaserEncoder.encode`; a screenshot is taken and read back with tesseract OCR (`apt-get install tesseract-ocr`) for
the expected text, and its heat map's colours are checked. Skipped, saying why, where Chromium or its driver is
missing. `HF_LASER_SCREENSHOT=demo.png` keeps the screenshot there, to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from serve_helpers import ServerProcess, require_serve_extra

require_serve_extra()

SENTENCES = ["The museum is closed on Mondays.", "Le musée est fermé le lundi.",
             "Das Museum ist montags geschlossen.", "Where is the train station?",
             "¿Dónde está la estación de tren?", "Где находится вокзал?"]
WAIT_S = 90


def _find(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    chromium = _find("chromium", "chromium-browser", "google-chrome")
    driver_path = _find("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("needs Chromium and its driver from the system packages (Debian: apt-get install chromium "
                    f"chromium-driver); found browser={chromium}, driver={driver_path}")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not try to download anything
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,1400", "--force-device-scale-factor=1", "--lang=en-US", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps"):
        options.add_argument(arg)
    from selenium.webdriver.chrome.service import Service

    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server():
    srv = ServerProcess()
    yield srv
    srv.cleanup()


def _wait_for(driver, css: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def _compare(driver, url: str, text: str, lang: str = "auto", k: int = 2) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    box = driver.find_element(By.ID, "sentences")
    box.clear()
    box.send_keys(text)
    for field, value in (("lang", lang), ("k", str(k))):
        el = driver.find_element(By.ID, field)
        el.clear()
        el.send_keys(value)
    driver.find_element(By.ID, "compare").click()


def test_demo_page_neighbours_scores_and_screenshot(browser, server, tmp_path):
    from selenium.webdriver.common.by import By

    from hf_laser import LaserEncoder

    _compare(browser, server.url, "\n".join(SENTENCES))
    _wait_for(browser, "#heatmap")
    emb = LaserEncoder.from_pretrained().encode(SENTENCES, lang="auto", normalize_embeddings=True)
    sims = emb @ emb.T
    rows = browser.find_elements(By.CSS_SELECTOR, "#neighbours tr")[1:]
    assert len(rows) == len(SENTENCES)
    for i, row in enumerate(rows):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[1].text.startswith(SENTENCES[i])
        shown = [re.match(r"(-?\d\.\d{3}) #(\d+) ", n.text).groups()
                 for n in cells[2].find_elements(By.CLASS_NAME, "neighbour")]
        expected = [j for j in np.argsort(-sims[i], kind="stable") if j != i][:2]
        assert [int(j) - 1 for _, j in shown] == expected, (i, shown)
        for score, j in shown:
            assert abs(float(score) - sims[i, int(j) - 1]) < 6e-4
    # the translations find each other: museum sentences 1-3, station sentences 4-6
    for i in range(6):
        first = int(rows[i].find_element(By.CLASS_NAME, "neighbour").text.split("#")[1].split()[0]) - 1
        assert first // 3 == i // 3, (i, first)
    langs = [r.find_element(By.CLASS_NAME, "lang").text for r in rows]
    assert langs == ["[en]", "[fr]", "[de]", "[en]", "[es]", "[ru]"]
    assert "6 sentences" in browser.find_element(By.ID, "status").text

    # the screenshot: its text (OCR) and its heat map (darker where the sentences are closer)
    heat = browser.find_element(By.ID, "heatmap")
    browser.execute_script("arguments[0].scrollIntoView(false)", heat)
    shot = tmp_path / "demo.png"
    if os.environ.get("HF_LASER_SCREENSHOT"):
        shot = __import__("pathlib").Path(os.environ["HF_LASER_SCREENSHOT"])
    assert browser.save_screenshot(str(shot))
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    cells = heat.find_elements(By.CSS_SELECTOR, "tr:nth-child(2) td")  # row of sentence 1

    def brightness(cell) -> float:
        r = cell.rect  # CSS pixels in the page; the screenshot shows the viewport
        top = r["y"] - browser.execute_script("return window.scrollY")
        box = (int(r["x"] + 3), int(top + 3), int(r["x"] + r["width"] - 3), int(top + r["height"] - 3))
        return float(np.asarray(image.crop(box)).mean())

    assert brightness(cells[1]) < brightness(cells[4]) - 40, "translation pair not darker than an unrelated pair"
    tesseract = shutil.which("tesseract")
    if tesseract is None:
        pytest.skip("the screenshot's text was not read: needs tesseract OCR (apt-get install tesseract-ocr)")
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(shot))
    text = subprocess.run([tesseract, str(shot), "-", "-l", "eng"], capture_output=True, text=True, timeout=120,
                          check=True).stdout
    flat = " ".join(text.split())
    for expected in ("LASER nearest neighbours", "Nearest neighbours", "The museum is closed on Mondays",
                     "Das Museum ist montags geschlossen", "Where is the train station"):
        assert expected in flat, f"{expected!r} not in the screenshot's text:\n{text}"


def test_demo_page_shows_errors_and_warnings(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _compare(browser, server.url, "Only one sentence.")
    WebDriverWait(browser, WAIT_S).until(lambda d: d.find_element(By.ID, "error").text)
    assert "at least two sentences" in browser.find_element(By.ID, "error").text
    _compare(browser, server.url, "Il pleut.\nEs regnet.", lang="xx")
    _wait_for(browser, "#heatmap")
    assert "unknown language code 'xx'" in browser.find_element(By.ID, "status").text
    assert browser.find_element(By.ID, "error").text == ""


def test_demo_page_clears_results_on_errors_and_checks_its_inputs(browser, server):
    """#47: after an input error the previous results and heat map stayed on screen, and `abc` was taken as the
    neighbour count; the page did not ask for a CJK font."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def error_shown(d):
        return d.find_element(By.ID, "error").text

    _compare(browser, server.url, "Il pleut.\nEs regnet.\nIt is raining.")
    _wait_for(browser, "#heatmap")
    for text, lang, k, expected in (("Il pleut.\nEs regnet.", "auto", "abc", "Neighbours must be a whole number"),
                                    ("Il pleut.\nEs regnet.", "auto", "0", "Neighbours must be a whole number"),
                                    ("Il pleut.\nEs regnet.", "francais", "2", "is not a language code"),
                                    ("Only one.", "auto", "2", "at least two sentences")):
        _compare(browser, server.url, "Il pleut.\nEs regnet.\nIt is raining.")
        _wait_for(browser, "#heatmap")
        box, lang_box, k_box = (browser.find_element(By.ID, i) for i in ("sentences", "lang", "k"))
        for element, value in ((box, text), (lang_box, lang), (k_box, k)):
            element.clear()
            element.send_keys(value)
        browser.find_element(By.ID, "compare").click()
        WebDriverWait(browser, WAIT_S).until(error_shown)
        assert expected in error_shown(browser), (k, lang, error_shown(browser))
        assert browser.find_elements(By.CSS_SELECTOR, "#heatmap, #neighbours") == []
        assert browser.find_element(By.ID, "status").text == ""
    font = browser.execute_script("return getComputedStyle(document.body).fontFamily")
    assert "Noto Sans CJK" in font and "Hiragino Sans" in font, font
