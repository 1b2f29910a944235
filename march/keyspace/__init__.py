"""march/keyspace"""
