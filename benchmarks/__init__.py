"""Side-by-side measurements against peer implementations (not run by CI by default)."""
