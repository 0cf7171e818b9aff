"""`python -m garden.export EXPORT_DIR` (README, BUILD.md): inspects an export.

The exporter and this command live in garden.serving.export; this module keeps the documented
command working.
"""

from garden.serving.export import main

if __name__ == "__main__":
    raise SystemExit(main())
