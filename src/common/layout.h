// Forwarding header: layouts are part of the public API.
#pragma once

#include "ciuic/layout.h"
