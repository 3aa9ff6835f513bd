"""Writing a text golden file atomically (shared by the dev-time golden generators):
the lines to path.tmp, then renamed over path, so a failed run leaves the old golden."""
import os


def write_lines(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
