"""aggregator"""
