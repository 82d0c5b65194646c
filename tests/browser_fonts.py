"""The fonts Chromium really drew with, through the DevTools protocol (shared by the browser tests)."""

from __future__ import annotations


def fonts_for(page, selector: str) -> list[str]:
    """Font families Chromium actually used to draw the first element matching `selector`."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    page.locator(selector).first.scroll_into_view_if_needed()
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    assert node, f"nothing matches {selector}"
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return [f["familyName"] for f in fonts]
