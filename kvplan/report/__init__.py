"""Views and reports: console tables, result.json, HTML, the CI gate."""
