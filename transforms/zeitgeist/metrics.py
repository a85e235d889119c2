"""The namespace of every Zeitgeist metric (what the summaries read)."""

METRICS_NAMESPACE = "millwheel.zeitgeist"
