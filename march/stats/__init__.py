"""march/stats"""
