"""The gate's verdict as JUnit XML: one testcase per check, so CI systems show each metric as a test."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from kvplan.gate.checks import GateVerdict, format_number


def junit_xml(verdict: GateVerdict) -> str:
    """One testsuite, one testcase per check (CI systems show each metric as a test)."""
    suite = ET.Element("testsuite", name=f"kvplan.gate.{verdict.scenario}", tests=str(len(verdict.checks)),
                       failures=str(len(verdict.failures)), errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="allocator", value=verdict.allocator)
    for i, note in enumerate(verdict.notes):
        ET.SubElement(props, "property", name=f"note{i}", value=note)
    for c in verdict.checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"kvplan.gate.{verdict.scenario}.{c.kind}", name=c.metric, time="0"
        )
        ref = "predicted" if c.kind == "prediction" else "baseline"
        text = f"{c.metric}: {ref} {format_number(c.baseline)}, current {format_number(c.current)}, limit {c.limit}" + (
            f" ({c.note})" if c.note else ""
        )
        if not c.passed:
            ET.SubElement(case, "failure", message=text, type=f"kvplan.gate.{c.kind}").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
