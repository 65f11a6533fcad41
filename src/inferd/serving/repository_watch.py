"""Telling what changed in the model repository from file metadata alone.

The repository poller (:mod:`inferd.serving.repository_poll`) looks at the tree
every ``repository_poll_secs``. Reading the artifacts to compare them would cost
as much as loading them, so a model folder's fingerprint is what ``stat`` says of
its files: their paths, sizes, modification times and inodes. A write changes the
size or the mtime; a file replaced by a rename, or a symlink switched to a new
target (Kubernetes' ConfigMap and Secret volumes), changes the inode.

A model folder is a folder holding a ``model-settings.json`` (as the repository
reads them); it owns the files below it, except those of a model folder nested in
it. Names starting with a dot are skipped, as the repository skips such folders:
writing a model into a hidden folder and renaming it into place is a change seen
at once, complete.

A change is acted on only once the folder's fingerprint is the same in two polls
in a row (:class:`ChangeTracker`), so a copy still in progress is not loaded
half-written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inferd.settings import MODEL_SETTINGS_FILE
from inferd.triton.model_folder import is_triton_model

# What tells a file's versions apart (mtime in ns, size, inode); None: it is missing.
Signature = tuple[int, int, int] | None
# One file of a model folder: its path inside the folder, and its signature.
FileEntry = tuple[str, int, int, int]
# A model folder's fingerprint: its files, sorted by path.
FolderPrint = tuple[FileEntry, ...]
# Every model folder (its path relative to the root; "." for the root) -> its fingerprint.
Snapshot = dict[str, FolderPrint]


def stat_signature(path: str | Path) -> Signature:
    """The file's signature, following symlinks; None when it cannot be stat'ed."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def fingerprint_repository(root: Path) -> Snapshot | None:
    """Every model folder under ``root`` and its fingerprint (stat calls only, no file
    read); None when ``root`` is not a folder (unmounted, not created yet)."""
    if not root.is_dir():
        return None
    owners: dict[str, str | None] = {}  # folder -> the model folder owning its files
    files: dict[str, list[FileEntry]] = {}
    for folder, subfolders, names in os.walk(root):
        relative = os.path.relpath(folder, root)
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        owner = relative if MODEL_SETTINGS_FILE in names else owners.get(relative)
        if owner is None and _triton_model(root, relative):
            owner = relative
        for subfolder in subfolders:
            owners[os.path.normpath(os.path.join(relative, subfolder))] = owner
        if owner is None:
            continue
        entries = files.setdefault(owner, [])
        # A symlinked folder is not walked into (os.walk's default, as the repository
        # reads it); its target's own stat still shows a switched link.
        linked = [name for name in subfolders if os.path.islink(os.path.join(folder, name))]
        # The folder's path inside its model folder, worked out once (relpath is slow).
        prefix = "" if relative == owner else os.path.relpath(relative, owner) + os.sep
        for name in [name for name in names if not name.startswith(".")] + linked:
            signature = stat_signature(os.path.join(folder, name))
            if signature is not None:  # gone since it was listed: the next poll sees it
                entries.append((prefix + name, *signature))
    return {owner: tuple(sorted(entries)) for owner, entries in files.items()}


def _triton_model(root: Path, relative: str) -> bool:
    """A Triton model's folder (``config.pbtxt``, or versions with ``model.py``): its
    version folders' files are its own."""
    return relative != "." and is_triton_model(root / relative)


@dataclass(slots=True)
class Changes:
    """What one poll found: folders whose change is complete, and those still moving."""

    # Complete changes: the folder's fingerprint now (None: it was removed).
    settled: dict[str, FolderPrint | None] = field(default_factory=dict)
    # Folders changed since the last poll: acted on once they stop changing.
    moving: set[str] = field(default_factory=set)

    @property
    def added(self) -> set[str]:
        return {folder for folder, found in self.settled.items() if found is not None}

    @property
    def removed(self) -> set[str]:
        return {folder for folder, found in self.settled.items() if found is None}


class ChangeTracker:
    """The fingerprints the served models were loaded from, against what polls see."""

    def __init__(self, baseline: Snapshot) -> None:
        # What is being served: the fingerprint each folder had when last acted on.
        self.applied: Snapshot = dict(baseline)
        self._previous: Snapshot = dict(baseline)

    def observe(self, snapshot: Snapshot) -> Changes:
        """Compare a new poll with what is served and with the poll before it."""
        changes = Changes()
        for folder in self.applied.keys() | snapshot.keys():
            now = snapshot.get(folder)
            if now == self.applied.get(folder):
                continue
            if now == self._previous.get(folder):
                changes.settled[folder] = now
            else:
                changes.moving.add(folder)
        self._previous = dict(snapshot)
        return changes

    def settle(self, folders: Mapping[str, FolderPrint | None]) -> None:
        """Record that these folders' changes were acted on (loaded, or tried)."""
        for folder, found in folders.items():
            if found is None:
                self.applied.pop(folder, None)
            else:
                self.applied[folder] = found


def names_to_act_on(
    changes: Changes,
    served_names: Mapping[str, str],
    names_now: Mapping[str, str],
    busy: Iterable[str] = (),
) -> dict[str, set[str]]:
    """Each model name to reload (or remove) now, with the settled folders it covers.

    A folder counts for the name it served under (``served_names``) and the name its
    settings give now (``names_now``): both when a folder was renamed. A name waits
    while one of its folders is still moving or while it is ``busy`` (being loaded),
    and so does every name sharing a folder with a waiting one, so that a folder is
    settled only once all its names were acted on. A settled folder with no name at
    all (it came and went between two polls) maps to the empty name "".
    """

    def names_of(folder: str) -> set[str]:
        return {name for name in (served_names.get(folder), names_now.get(folder)) if name}

    waiting = set(busy).union(*(names_of(folder) for folder in changes.moving))
    spread = True
    while spread:  # until no folder links a waiting name to one that would go
        spread = False
        for folder in changes.settled:
            names = names_of(folder)
            if names & waiting and not names <= waiting:
                waiting |= names
                spread = True
    plan: dict[str, set[str]] = {}
    for folder in changes.settled:
        names = names_of(folder) or {""}
        if not names & waiting:
            for name in names:
                plan.setdefault(name, set()).add(folder)
    return plan
