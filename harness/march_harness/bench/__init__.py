"""The pieces of scripts/bench and scripts/drill that are not the command line: running and
parsing redis-benchmark (`redisbench`), starting the servers a benchmark compares (`targets`),
and drawing the PNG reports (`charts`). Nothing here asserts speed; it measures and draws.
"""
