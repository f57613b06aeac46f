/*-------------------------------------------------------------------------
 *
 * routed_plan.h
 *	  The statements of the routed claims, prepared per records table and
 *	  kept (routed_plan.c), for the routed entry points (colocated.c): a
 *	  header within citus/, whose interface is citus.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_ROUTED_PLAN_H
#define DEDUP_ROUTED_PLAN_H

#include "executor/spi.h"

/* the statements prepared per records table */
typedef enum RoutedStatement
{
	ROUTED_CLAIM,
	ROUTED_CLAIM_MANY,
	ROUTED_SEEN,
	ROUTED_FORGET,
	ROUTED_STATEMENTS
} RoutedStatement;

/* a registered records table, as this backend knows it */
typedef struct ColocatedTable
{
	Oid			relid;			/* hash key */
	bool		valid;			/* false: look it up again */
	Oid			route_type;
	Oid			route_input;	/* its input function */
	Oid			route_ioparam;
	SPIPlanPtr	plans[ROUTED_STATEMENTS];
} ColocatedTable;

extern ColocatedTable *dedup_colocated_table(Oid relid);
extern SPIPlanPtr dedup_routed_plan(ColocatedTable *table,
									RoutedStatement kind);
extern Datum dedup_route_value(ColocatedTable *table, text *route);

#endif							/* DEDUP_ROUTED_PLAN_H */
