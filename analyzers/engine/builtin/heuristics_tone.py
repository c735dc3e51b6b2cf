"""Tone problems found by phrase rules (no model): condescension, dismissal, profanity."""

from __future__ import annotations

import re

from analyzers.engine.builtin.heuristics import Finding, Rule, find, rule

_SHOUTING_SHAPE = re.compile(rb"AAAA +A{4,} +AAAA")

TONE_RULES: list[Rule] = [
    rule(
        "condescending",
        r"\bas (?:anyone|everyone|any \w+) (?:knows|should know|can see)\b"
        r"|\beven a (?:child|kid|beginner|toddler) (?:could|can|knows|would)\b"
        r"|\bit(?:'s|’s| is) (?:really |actually )?(?:not (?:that )?(?:hard|difficult|complicated)"
        r"|not rocket science)\b"
        r"|\blet me explain (?:this |it )?(?:slowly|simply|again|one more time)\b"
        r"|\bi(?:'m|’m| am) surprised you (?:don't|don’t|didn't|didn’t|do not) know\b"
        r"|\byou (?:really )?should (?:already )?(?:know|have known)\b"
        r"|\b(?:surely|clearly) you (?:know|understand|can see|realize|realise)\b"
        r"|\btry to keep up\b|\bdid you (?:even|actually) (?:read|try|look)\b"
        r"|\bany (?:competent|decent|half-decent|first-year|junior) \w+ (?:knows|would know|could)\b"
        r"|\bthis is (?:very |pretty |really )?(?:basic|elementary|trivial) stuff\b",
        0.4,
        "Talks down to the user.",
    ),
    rule(
        "condescending",
        r"\bobviously\b|\bsimply put, you\b",
        0.15,
        "Implies the point should have been obvious to the user.",
        "info",
    ),
    rule(
        "dismissive",
        r"\b(?:that's|that’s|that is|what) an? (?:stupid|dumb|silly|pointless|ridiculous|useless)"
        r" (?:question|idea|concern|request)\b",
        0.6,
        "Belittles the user's question instead of answering it.",
        "critical",
    ),
    rule(
        "dismissive",
        r"\b(?:just )?google it\b|\b(?:look it up|figure it out) yourself\b|\brtfm\b"
        r"|\bnot worth (?:my|your|the) time\b|\b(?:that's|that’s|it's|it’s|that is) not my problem\b"
        r"|\bi don'?t have time for (?:this|that)\b|\bstop asking\b|\bwho cares\b"
        r"|(?:^|(?<=[.!?] ))whatever[.!]"
        r"|\byour (?:question|concern|opinion) (?:doesn't|doesn’t|does not) matter\b"
        r"|\byour (?:question|concern|opinion) is (?:irrelevant|not important)\b",
        0.45,
        "Brushes off the user instead of helping.",
    ),
    rule(
        "unprofessional",
        r"\b(?:fuck\w*|motherfuck\w*|shit\w*|bullshit|asshole|bitch\w*|bastard|dumbass|wtf)\b",
        0.6,
        "Profanity.",
        "critical",
    ),
    rule(
        "unprofessional",
        r"\b(?:crap(?:py)?|damn(?:ed|it)?|pissed|screw (?:it|that|this)|what the hell)\b",
        0.4,
        "Crude language.",
    ),
    rule(
        "unprofessional",
        r"\b(?:lol|lmao|rofl|bruh|dude)\b",
        0.2,
        "Slang unfit for a business assistant.",
        "info",
    ),
    rule(
        "unprofessional",
        r"[!?]{3,}",
        0.15,
        "Excessive punctuation.",
        "info",
        gate=lambda probe: b"!!!" in probe.shape,
    ),
    rule(
        "unprofessional",
        r"\b[A-Z]{4,}(?:[ ,]+[A-Z]{4,}){2,}\b",
        0.2,
        "Shouting in capitals.",
        "info",
        flags=re.MULTILINE,
        # three words of four or more capitals, apart by spaces or commas (both " " in
        # the shape): one capitalised word ("SECRET" in a URL) no longer runs the regex
        # (a plain search for four capitals first: most answers have none)
        gate=lambda probe: (
            b"AAAA" in probe.shape and _SHOUTING_SHAPE.search(probe.shape) is not None
        ),
    ),
]


def tone_signals(response: str) -> list[Finding]:
    return find(response, TONE_RULES)
