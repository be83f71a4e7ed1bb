"""`duecast web`: a read-mostly dashboard (Flask + waitress, server-side SVG charts, no build step).

app.py builds the application, pages.py and actions.py hold its views, charts.py draws, serve.py wires.
"""
