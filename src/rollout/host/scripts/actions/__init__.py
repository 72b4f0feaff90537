"""The host actions by family (ops.py is the one entry point a host runs; script_text()
inlines these modules into it). Standard library only; python3 >= 3.9."""
