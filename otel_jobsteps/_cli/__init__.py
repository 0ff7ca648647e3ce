"""The command line's helpers: its arguments (``cli`` and ``actions.cli`` read them alike), the
timeline renderer, times and durations as people read them (the web page's too), the demo, the
install hint of a missing extra."""
