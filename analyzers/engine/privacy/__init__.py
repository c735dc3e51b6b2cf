"""Personal data and secrets: pure detectors with offsets (detect.py, pii.py, keys.py) and
the `privacy` analyzer (analyzer.py)."""
