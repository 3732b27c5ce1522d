"""Confinement: path zones, hook points, the blast radius from the import graph, escapes in the AST."""
