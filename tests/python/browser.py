"""Headless Chromium for the chat page's tests (test_chat_page.py) and its screenshot
(tools/screenshot_chat_page.py): Debian's `chromium` and `chromium-driver` (scripts/test.sh installs
them), driven through Selenium. Every host name but 127.0.0.1 is made unresolvable, so a page that
needed anything from the internet would show it."""
import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
DEBIAN_DRIVER = Path("/usr/bin/chromedriver")


def find(names, extra=()):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    for path in extra:
        if Path(path).is_file():
            return str(path)
    return None


def missing():
    """Why no browser can run, or None."""
    if not find(BROWSERS):
        return "no chromium on PATH: install Debian's chromium and chromium-driver (scripts/test.sh does)"
    if not find(DRIVERS, [DEBIAN_DRIVER]):
        return "no chromedriver: install Debian's chromium-driver (scripts/test.sh does)"
    return None


def chromium(width=1280, height=900, scale=1):
    """A headless Chromium; the caller quits it. Its console is kept (browser log, every level)."""
    why = missing()
    if why:
        raise RuntimeError(why)
    options = webdriver.ChromeOptions()
    options.binary_location = find(BROWSERS)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", f"--force-device-scale-factor={scale}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-features=Translate",
                # Offline: no name resolves except the server's address.
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver is given by path, so Selenium never tries to download one.
    service = Service(executable_path=find(DRIVERS, [DEBIAN_DRIVER]))
    driver = webdriver.Chrome(options=options, service=service)
    # The page's own size (--window-size counts the window, which headless Chromium makes taller than its view).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False})
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return driver


def wait(driver, condition, timeout=60, message=""):
    """Waits until condition(driver) is truthy and returns it."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, message)
