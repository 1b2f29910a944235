"""march/backup"""
