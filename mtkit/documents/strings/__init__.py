"""The string files software is localized in: JSON, YAML, ARB, Android, iOS, Java properties, CSV."""
