"""Small shared building blocks: paths, atomic writes, text safety, JSON, package resources."""
