/*-------------------------------------------------------------------------
 *
 * sweep_vacuum.h
 *	  The sweeper's VACUUM of processed_messages and dedup_outbox after a
 *	  sweep that left many dead rows in them (sweep_vacuum.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEP_VACUUM_H
#define DEDUP_SWEEP_VACUUM_H

#include "datatype/timestamp.h"

extern bool dedup_sweep_vacuum(TimestampTz deadline);
extern bool dedup_sweep_vacuum_cut(TimestampTz deadline);

#endif							/* DEDUP_SWEEP_VACUUM_H */
