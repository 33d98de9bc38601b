"""Sources of the bundled CPU kernel repositories (one folder each), shipped as package data."""
