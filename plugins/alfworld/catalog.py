"""What a household holds: receptacle and object types, their properties, what fits where, rooms.

The facts follow ALFRED/ALFWorld (Shridhar et al., 2020/2021): object and receptacle classes are
ALFRED's, lower-cased as ALFWorld prints them ("sinkbasin", "alarmclock"); which object fits in
which receptacle, and which objects can be heated, cooled, cleaned, sliced or toggled, follow
ALFRED's ``VAL_RECEPTACLE_OBJECTS`` / ``VAL_ACTION_OBJECTS`` tables, restricted to the classes used
here. Scene numbers follow ALFRED's floor plans: kitchens 1-30, living rooms 201-230, bedrooms
301-330, bathrooms 401-430; the first six of each kind are held out of training (the
"unseen" rooms of ALFWorld's out-of-distribution evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass

# -- receptacles --------------------------------------------------------------------------------

OPENABLE: frozenset[str] = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
"""Receptacles that are closed until opened: their contents are hidden and out of reach."""

HEATER, COOLER, WASHER = "microwave", "fridge", "sinkbasin"
"""The appliance each state change needs (``heat X with microwave``, ``cool ... fridge``, ``clean ... sinkbasin``)."""

_SURFACE: frozenset[str] = frozenset(
    "alarmclock apple baseballbat basketball book bowl bread butterknife candle cd cellphone cloth creditcard "
    "cup dishsponge egg fork handtowel kettle keychain knife ladle laptop lettuce mug newspaper pan pen pencil "
    "peppershaker plate pot potato remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle statue "
    "tennisracket tissuebox toiletpaper tomato vase watch winebottle".split()
)
_SEATING = frozenset(
    "basketball book cellphone cloth creditcard keychain laptop newspaper pillow remotecontrol".split()
)
_FURNITURE_TOP = frozenset(
    "alarmclock basketball book bowl cd candle cellphone cloth creditcard cup keychain laptop mug newspaper pen "
    "pencil plate remotecontrol spraybottle statue tennisracket tissuebox toiletpaper vase watch winebottle".split()
)

CAN_CONTAIN: dict[str, frozenset[str]] = {
    "countertop": _SURFACE,
    "diningtable": _SURFACE,
    "coffeetable": _SURFACE,
    "sidetable": _SURFACE,
    "cabinet": frozenset(
        "book bowl candle cd cloth cup dishsponge handtowel kettle ladle mug newspaper pan peppershaker plate plunger "
        "pot saltshaker soapbar soapbottle spraybottle tissuebox toiletpaper vase winebottle".split()
    ),
    "drawer": frozenset(
        "book butterknife candle cd cellphone cloth creditcard dishsponge fork handtowel keychain knife ladle newspaper "
        "pen pencil peppershaker remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle tissuebox "
        "toiletpaper watch".split()
    ),
    "fridge": frozenset(
        "apple bowl bread cup egg lettuce mug pan plate pot potato tomato winebottle".split()
    ),
    "microwave": frozenset("apple bowl bread cup egg mug plate potato tomato".split()),
    "sinkbasin": frozenset(
        "apple bowl butterknife cloth cup dishsponge egg fork handtowel kettle knife ladle lettuce mug pan plate pot "
        "potato soapbar spatula spoon tomato".split()
    ),
    "stoveburner": frozenset({"kettle", "pan", "pot"}),
    "coffeemachine": frozenset({"mug"}),
    "toaster": frozenset(),
    "garbagecan": frozenset(
        "apple bread cd cloth dishsponge egg handtowel lettuce newspaper pen pencil potato soapbar soapbottle "
        "spraybottle tissuebox toiletpaper tomato winebottle".split()
    ),
    "shelf": frozenset(
        "alarmclock book bowl candle cd cellphone cloth creditcard cup dishsponge handtowel kettle keychain mug "
        "newspaper pen pencil peppershaker plate pot remotecontrol saltshaker soapbar soapbottle spraybottle statue "
        "tissuebox toiletpaper vase watch winebottle".split()
    ),
    "armchair": _SEATING,
    "sofa": _SEATING,
    "ottoman": _SEATING,
    "bed": frozenset("baseballbat basketball book cellphone laptop newspaper pillow tennisracket".split()),
    "desk": _FURNITURE_TOP | {"soapbottle"},
    "dresser": _FURNITURE_TOP,
    "safe": frozenset("cd cellphone creditcard keychain statue vase watch".split()),
    "tvstand": frozenset({"tissuebox"}),
    "bathtubbasin": frozenset({"cloth", "dishsponge", "handtowel", "soapbar"}),
    "toilet": frozenset(
        "candle cloth dishsponge handtowel newspaper soapbar soapbottle spraybottle tissuebox toiletpaper".split()
    ),
    "toiletpaperhanger": frozenset({"toiletpaper"}),
    "towelholder": frozenset({"towel"}),
    "handtowelholder": frozenset({"handtowel"}),
    "laundryhamper": frozenset({"cloth"}),
    "cart": frozenset(
        "candle cloth dishsponge handtowel mug plunger soapbar soapbottle spraybottle statue tissuebox toiletpaper vase".split()
    ),
}

LAMP_HOLDERS: frozenset[str] = frozenset({"desk", "sidetable", "dresser"})
"""Where a desk lamp stands (lamps are not pickupable; they are used where they are)."""

# -- objects ------------------------------------------------------------------------------------

HEATABLE = frozenset("apple bread cup egg mug plate potato tomato".split())
COOLABLE = frozenset("apple bowl bread cup egg lettuce mug pan plate pot potato tomato winebottle".split())
CLEANABLE = frozenset(
    "apple bowl butterknife cloth cup dishsponge egg fork kettle knife ladle lettuce mug pan plate pot potato "
    "soapbar spatula spoon tomato".split()
)
SLICEABLE = frozenset("apple bread egg lettuce potato tomato".split())
TOGGLEABLE = frozenset({"desklamp"})
RECEPTACLE_OBJECTS = frozenset("bowl cup mug pan plate pot".split())
"""Movable receptacles: examining one held describes what is in it (always nothing here)."""
SHARP = frozenset({"knife", "butterknife"})
"""What ``slice X with Y`` needs in hand."""


@dataclass(frozen=True, slots=True)
class ObjectKind:
    """Static properties of an object class."""

    name: str
    pickupable: bool
    heatable: bool
    coolable: bool
    cleanable: bool
    sliceable: bool
    toggleable: bool
    receptacle_object: bool
    sharp: bool


def object_kind(name: str) -> ObjectKind:
    return _KINDS[name]


# -- rooms --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoomKind:
    """A kind of room: how many receptacles of each type a scene of it has, and its objects."""

    name: str
    scenes: range
    receptacles: tuple[tuple[str, int, int], ...]
    """(receptacle type, fewest, most) per scene."""
    objects: tuple[str, ...]
    """Object classes that may appear in a scene of this kind."""


ROOMS: dict[str, RoomKind] = {
    "kitchen": RoomKind(
        "kitchen",
        range(1, 31),
        (
            ("cabinet", 3, 10),
            ("coffeemachine", 1, 1),
            ("countertop", 1, 3),
            ("diningtable", 0, 1),
            ("drawer", 1, 6),
            ("fridge", 1, 1),
            ("garbagecan", 1, 1),
            ("microwave", 1, 1),
            ("shelf", 0, 3),
            ("sinkbasin", 1, 1),
            ("stoveburner", 2, 4),
            ("toaster", 0, 1),
        ),
        tuple(
            "apple bowl bread butterknife cup dishsponge egg fork kettle knife ladle lettuce mug pan peppershaker "
            "plate pot potato saltshaker soapbottle spatula spoon tomato winebottle".split()
        ),
    ),
    "livingroom": RoomKind(
        "livingroom",
        range(201, 231),
        (
            ("armchair", 0, 2),
            ("cabinet", 0, 4),
            ("coffeetable", 1, 1),
            ("diningtable", 0, 1),
            ("drawer", 0, 4),
            ("garbagecan", 1, 1),
            ("ottoman", 0, 1),
            ("shelf", 0, 4),
            ("sidetable", 1, 2),
            ("sofa", 1, 1),
            ("tvstand", 0, 1),
        ),
        tuple(
            "book bowl cellphone creditcard keychain laptop newspaper pillow plate remotecontrol statue tissuebox "
            "vase watch".split()
        ),
    ),
    "bedroom": RoomKind(
        "bedroom",
        range(301, 331),
        (
            ("armchair", 0, 1),
            ("bed", 1, 1),
            ("desk", 0, 1),
            ("drawer", 2, 6),
            ("dresser", 0, 1),
            ("garbagecan", 1, 1),
            ("laundryhamper", 0, 1),
            ("safe", 0, 1),
            ("shelf", 0, 6),
            ("sidetable", 1, 2),
        ),
        tuple(
            "alarmclock baseballbat basketball book bowl cd cellphone cloth creditcard keychain laptop mug pen "
            "pencil pillow tennisracket".split()
        ),
    ),
    "bathroom": RoomKind(
        "bathroom",
        range(401, 431),
        (
            ("bathtubbasin", 0, 1),
            ("cabinet", 2, 4),
            ("cart", 0, 1),
            ("countertop", 1, 1),
            ("drawer", 0, 4),
            ("garbagecan", 1, 1),
            ("handtowelholder", 0, 1),
            ("shelf", 0, 2),
            ("sinkbasin", 1, 2),
            ("toilet", 1, 1),
            ("toiletpaperhanger", 1, 1),
            ("towelholder", 0, 1),
        ),
        tuple(
            "candle cloth dishsponge handtowel plunger soapbar soapbottle spraybottle tissuebox toiletpaper "
            "towel".split()
        ),
    ),
}

HELD_OUT_PER_KIND = 6
"""The first scenes of each room kind are unseen in training (ALFRED's test floor plans)."""


def room_of_scene(scene: int) -> RoomKind:
    for kind in ROOMS.values():
        if scene in kind.scenes:
            return kind
    raise ValueError(f"scene {scene} is not an ALFRED floor plan number (1-30, 201-230, 301-330, 401-430)")


def seen_scenes() -> list[int]:
    return [s for kind in ROOMS.values() for s in kind.scenes[HELD_OUT_PER_KIND:]]


def unseen_scenes() -> list[int]:
    return [s for kind in ROOMS.values() for s in kind.scenes[:HELD_OUT_PER_KIND]]


_ALL_OBJECTS = sorted({o for kind in ROOMS.values() for o in kind.objects} | TOGGLEABLE)
_KINDS: dict[str, ObjectKind] = {
    name: ObjectKind(
        name=name,
        pickupable=name not in TOGGLEABLE,
        heatable=name in HEATABLE,
        coolable=name in COOLABLE,
        cleanable=name in CLEANABLE,
        sliceable=name in SLICEABLE,
        toggleable=name in TOGGLEABLE,
        receptacle_object=name in RECEPTACLE_OBJECTS,
        sharp=name in SHARP,
    )
    for name in _ALL_OBJECTS
}
