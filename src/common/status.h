// Forwarding header: Status and Result<T> are part of the public API.
#pragma once

#include "ciuic/status.h"
