"""Browser side of the explorer's custom widgets (anywidget ES modules and CSS), shipped as package data."""
