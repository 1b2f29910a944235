"""march/transport"""
