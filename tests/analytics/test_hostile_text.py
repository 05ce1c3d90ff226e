"""Hostile text stays text: payloads in a category, prompt ids, outputs, error
messages and manifest fields inject no element and no script into report.html,
and the charts still parse and still carry the category."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from specdec.analytics.report.html import esc, script_json
from specdec.analytics.report.write import write_report
from tests.support.synthetic_run import failed, make_manifest, make_requests, write_run

SCRIPT = "</script><script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>\u2028"


class Elements(HTMLParser):
    """Start tags seen and the text of each <script> element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def hostile_run(run_dir):
    reqs = []
    for r in make_requests():
        r = r.model_copy(
            update={
                "category": SCRIPT if r.category == "code" else r.category,
                "prompt_id": r.prompt_id + IMG,
                "output_text": IMG + r.output_text,
            }
        )
        if (r.arm, r.level, r.category) == ("baseline", 2, "chat"):
            r = failed(r, message="HTTP 500: " + IMG)
        reqs.append(r)
    manifest = make_manifest(
        model=IMG, dtype=IMG, notes=[IMG], arm_difference=[IMG], capture={"source": "embedded", "path": IMG}
    )
    return write_run(run_dir, requests=reqs, manifest=manifest)


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def test_hostile_text_is_escaped_and_the_charts_still_render(tmp_path):
    out, summary = write_report(hostile_run(tmp_path))
    page = out.read_text(encoding="utf-8")
    parsed = Elements()
    parsed.feed(page)
    parsed.close()
    assert "img" not in parsed.tags
    assert parsed.tags.count("script") == 2  # the Vega bundle and the embeds, nothing injected
    # the payloads are shown, as text
    assert esc(SCRIPT) in page  # the category in the tables
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # error example, manifest fields
    # the embeds: one call per chart, each spec valid JSON that still holds the category
    embeds = parsed.scripts[1].strip().splitlines()
    specs = {}
    for line in embeds:
        m = re.fullmatch(r"vegaEmbed\('#(\w+)', (.*), \{actions: false\}\);", line)
        assert m, line
        specs[m.group(1)] = json.loads(m.group(2))
    assert set(specs) == {"forest", "speedup", "throughput", "acceptance_positions", "latency_cdf"}
    assert SCRIPT in set(strings(specs["speedup"]))
    assert any(SCRIPT in s for s in strings(specs["forest"]))  # a forest row names the category
    assert "<" not in parsed.scripts[1] and "\u2028" not in parsed.scripts[1]
    # the terminal summary shows the line separator escaped, not as a line break
    assert "\u2028" not in summary and "onerror=alert(1)>\\u2028" in summary


def test_script_json_is_inert_and_round_trips():
    value = {"c": SCRIPT, "i": IMG + "\u2029&<!--", "n": [1, 2.5, None], "nan": float("nan")}
    text = script_json(value)
    assert not set(text) & set("<>&\u2028\u2029")
    back = json.loads(text)
    assert back == {**value, "nan": None}  # NaN is not JSON: not applicable
