"""march/access"""
