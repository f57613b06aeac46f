/*-------------------------------------------------------------------------
 *
 * stream_offsets.h
 *	  What the claims by offset (stream_offsets.c) and the functions that
 *	  read and remove stream positions (stream_positions.c) share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_STREAM_OFFSETS_H
#define DEDUP_STREAM_OFFSETS_H

#include "storage/lockdefs.h"
#include "utils/relcache.h"

#include "tables/relations.h"

/* the columns of stream_positions */
#define POSITION_CONSUMER		1
#define POSITION_STREAM			2
#define POSITION_PARTITION		3
#define POSITION_OFFSET			4
#define POSITION_UPDATED_AT		5
#define POSITION_COLUMNS		5

extern Relation dedup_positions_open(const char *function, LOCKMODE lockmode,
									 const DedupRelations **rels);

#endif							/* DEDUP_STREAM_OFFSETS_H */
