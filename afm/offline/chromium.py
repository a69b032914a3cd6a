"""Headless Chromium for tests and benchmarks: Debian's ``chromium`` and ``chromium-driver`` through Selenium.

    with headless_chromium() as driver:
        driver.get(Path("view.html").absolute().as_uri())

The browser gets a fresh profile and the flags that keep it from reaching out on its own (background networking,
component updates, sync, QUIC): on a machine with a closed network those connections are refused and logged, and
the tests check that a page makes no request. ``AFM_CHROMIUM`` / ``AFM_CHROMEDRIVER`` point at other binaries.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def binaries() -> tuple[str | None, str | None]:
    """``(chromium, chromedriver)`` paths, None where not found (an ``AFM_*`` variable naming no program included)."""
    chromium = os.environ.get("AFM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("AFM_CHROMEDRIVER") or shutil.which("chromedriver")
    return (shutil.which(chromium) if chromium else None), (shutil.which(driver) if driver else None)


def missing() -> str | None:
    """Why headless Chromium cannot run here (for a test's skip reason), or None."""
    chromium, driver = binaries()
    if chromium is None:
        return "needs Chromium: apt-get install chromium (or set AFM_CHROMIUM)"
    if driver is None:
        return "needs ChromeDriver: apt-get install chromium-driver (or set AFM_CHROMEDRIVER)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs Selenium: pip install 'afm[dev]'"
    return None


@contextmanager
def headless_chromium(*, javascript: bool = True, width: int = 1280, height: int = 900,
                      log: bool = True) -> Iterator[Any]:
    """A Selenium driver of a fresh headless Chromium; with ``log``, the browser's console and network events are
    kept (``driver.get_log("browser")`` / ``"performance"``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    chromium, driver_path = binaries()
    profile = tempfile.mkdtemp(prefix="afm-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    if log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
