"""`duecast pause` / `duecast resume`: stop and restart the claims and starts of a source, a job
queue, a consumer group or a job task (shared.api.pauses); `duecast pause` alone lists what is paused.
"""

from __future__ import annotations

from ..shared.api import pauses
from ..shared.process import arguments
from ..shared.process.failures import EXIT_OK, StartupError
from ..shared.settings import load_settings

USAGE = "source NAME | queue NAME | group TOPIC GROUP | task NAME"


def main(rest: list[str], *, resume: bool = False) -> int:
    verb = "resume" if resume else "pause"
    parser = arguments.parser(
        f"duecast {verb}",
        "Pause: nothing more of it is claimed or started within about a second; what runs finishes. "
        "A paused task's jobs stay pending while the other tasks of its queue go on. "
        "Resume: it goes on from where it was. Kept in MySQL (duecast_pauses): restarts and a "
        "Redis flush keep it." + ("" if resume else " With no arguments: list what is paused."),
    )
    parser.add_argument("kind", nargs="?" if not resume else None, choices=pauses.KINDS, help=USAGE)
    parser.add_argument("names", nargs="*", help="NAME, or TOPIC GROUP for a group")
    args = parser.parse_args(rest)
    settings = load_settings(args.config)
    if args.kind is None:
        listed = pauses.paused(settings)
        for p in listed:
            print(f"{p.kind} {p.name}: paused since {p.paused_at:%Y-%m-%d %H:%M:%S} (MySQL time)")
        if not listed:
            print("nothing is paused")
        return EXIT_OK
    try:
        act = pauses.resume if resume else pauses.pause
        changed = act(settings, args.kind, *args.names)
    except pauses.PauseError as exc:
        raise StartupError(str(exc)) from exc
    what = f"{args.kind} {' '.join(args.names)}"
    if resume:
        print(f"resumed {what}" if changed else f"{what} was not paused")
    elif changed:
        print(f"paused {what}: nothing more starts within a second")
    else:
        print(f"{what} was already paused")
    return EXIT_OK
